// A ref's head commit, asked of the forge (GitHub's branches and commits API,
// Gitea's branches API) or, for a repository on this machine, of git: what a
// manual run without a sha and a schedule's tick run. One entry per forge in
// BRANCH_HEAD; a new forge is one more entry.
import { execFile } from 'node:child_process';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Forge } from '../states.ts';
import {
  apiBase,
  callForge,
  DEFAULT_TIMEOUT_MS,
  type ForgeAnswer,
  ForgeRefusedError,
  ForgeTransportError,
  ForgeUnavailableError,
  forgeHeaders,
  forgeName,
  transportErrorText,
} from './client.ts';
import { isLocalRepo } from './pipeline-file.ts';

export interface BranchSource {
  forge: Forge;
  /** `owner/name` on the forge. */
  repo: string;
  repoUrl: string;
  forgeUrl: string | null;
  githubApiUrl: string;
  token: string | null;
}

/**
 * The head of a ref: `{ref, sha}` with the ref in full (`refs/heads/main`);
 * `found: false` with a reason no retry fixes (no such branch, a token the
 * forge refuses); ForgeUnavailableError for what may pass.
 */
export type HeadResult =
  | { found: true; ref: string; sha: string }
  | { found: false; reason: string };

const SHA = /^[0-9a-f]{40}([0-9a-f]{24})?$/;

/** How one forge answers "the head of this branch" and "the default branch". */
interface BranchApi {
  /** The URL of a branch's (or tag's, GitHub) head commit. */
  headUrl(api: string, repo: string, name: string, isTag: boolean): string;
  /** The sha in that answer. */
  headSha(body: unknown): unknown;
  /** The URL of the repository, whose answer names its default branch. */
  repoUrl(api: string, repo: string): string;
}

const enc = (repo: string) => repo.split('/').map(encodeURIComponent).join('/');

const BRANCH_HEAD: Readonly<Record<Forge, BranchApi>> = {
  github: {
    // commits/{ref} takes `heads/x` and `tags/x` alike and answers the commit (a tag's target).
    headUrl: (api, repo, name, isTag) =>
      `${api}/repos/${enc(repo)}/commits/${isTag ? 'tags' : 'heads'}/${encodeURIComponent(name)}`,
    headSha: (body) => (body as { sha?: unknown } | null)?.sha,
    repoUrl: (api, repo) => `${api}/repos/${enc(repo)}`,
  },
  gitea: {
    headUrl: (api, repo, name, isTag) =>
      `${api}/repos/${enc(repo)}/${isTag ? 'tags' : 'branches'}/${encodeURIComponent(name)}`,
    headSha: (body) =>
      (body as { commit?: { id?: unknown; sha?: unknown } } | null)?.commit?.id ??
      (body as { commit?: { sha?: unknown } } | null)?.commit?.sha,
    repoUrl: (api, repo) => `${api}/repos/${enc(repo)}`,
  },
};

/**
 * The head commit of `ref` (a branch name, `refs/heads/x` or `refs/tags/x`),
 * or of the repository's default branch when `ref` is null.
 */
export async function resolveHead(
  src: BranchSource,
  ref: string | null,
  opts: { timeoutMs?: number } = {},
): Promise<HeadResult> {
  const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  if (isLocalRepo(src.repoUrl)) return headFromGit(src.repoUrl, ref, timeoutMs);
  const api = apiBase(src.forge, { githubApiUrl: src.githubApiUrl, forgeUrl: src.forgeUrl });
  if (api === null) {
    return { found: false, reason: 'the project has no forge_url: the Gitea base URL is needed' };
  }
  const table = BRANCH_HEAD[src.forge];
  let name: string;
  let isTag = false;
  if (ref === null) {
    const repo = await getJson(src, table.repoUrl(api, src.repo), timeoutMs, 'the repository');
    if (!repo.ok) return { found: false, reason: repo.reason };
    const branch = (repo.body as { default_branch?: unknown } | null)?.default_branch;
    if (typeof branch !== 'string' || branch === '') {
      return {
        found: false,
        reason: `${forgeName(src.forge)} did not name ${src.repo}'s default branch`,
      };
    }
    name = branch;
  } else if (ref.startsWith('refs/tags/')) {
    name = ref.slice('refs/tags/'.length);
    isTag = true;
  } else {
    name = ref.startsWith('refs/heads/') ? ref.slice('refs/heads/'.length) : ref;
  }
  const full = `${isTag ? 'refs/tags/' : 'refs/heads/'}${name}`;
  const what = `${isTag ? 'tag' : 'branch'} ${name}`;
  const head = await getJson(src, table.headUrl(api, src.repo, name, isTag), timeoutMs, what);
  if (!head.ok) return { found: false, reason: head.reason };
  const sha = table.headSha(head.body);
  if (typeof sha !== 'string' || !SHA.test(sha.toLowerCase())) {
    return { found: false, reason: `${forgeName(src.forge)} answered no commit for ${what}` };
  }
  return { found: true, ref: full, sha: sha.toLowerCase() };
}

async function getJson(
  src: BranchSource,
  url: string,
  timeoutMs: number,
  what: string,
): Promise<{ ok: true; body: unknown } | { ok: false; reason: string }> {
  const forge = forgeName(src.forge);
  let answer: ForgeAnswer;
  try {
    answer = await callForge({ url, headers: forgeHeaders(src.forge, src.token), timeoutMs });
  } catch (error) {
    if (error instanceof ForgeRefusedError) return { ok: false, reason: error.message };
    if (error instanceof ForgeTransportError) {
      throw new ForgeUnavailableError(
        `${forge} could not be reached asking for ${what} of ${src.repo} (${transportErrorText(error, timeoutMs)})`,
        { cause: error },
      );
    }
    throw error;
  }
  if (answer.kind === 'ok' && answer.body !== null) {
    try {
      return { ok: true, body: JSON.parse(answer.body.toString('utf8')) };
    } catch {
      return {
        ok: false,
        reason: `${forge} answered ${what} of ${src.repo} with something not JSON`,
      };
    }
  }
  if (answer.status === 404) return { ok: false, reason: `${what} does not exist in ${src.repo}` };
  if (answer.kind === 'rate_limited' || answer.kind === 'retryable') {
    throw new ForgeUnavailableError(
      `${forge} answered HTTP ${answer.status} asking for ${what} of ${src.repo}`,
    );
  }
  if (answer.status === 401 || answer.status === 403) {
    return {
      ok: false,
      reason: `the forge refused access to ${src.repo} (HTTP ${answer.status}): check the project's forge token`,
    };
  }
  return {
    ok: false,
    reason: `${forge} answered HTTP ${answer.status} asking for ${what} of ${src.repo}`,
  };
}

// A branch or tag name git accepts, refused before git sees anything that
// could read as an option or a revision expression.
const REF_NAME = /^(?!-)(?!.*\.\.)[A-Za-z0-9._/-]{1,255}$/;

async function headFromGit(
  repoUrl: string,
  ref: string | null,
  timeoutMs: number,
): Promise<HeadResult> {
  let path: string;
  try {
    path = /^file:\/\//i.test(repoUrl) ? fileURLToPath(repoUrl) : resolve(repoUrl);
  } catch (error) {
    return { found: false, reason: `${repoUrl} is not a usable file URL: ${String(error)}` };
  }
  let full: string;
  if (ref === null) {
    const head = await git(path, ['symbolic-ref', '--quiet', 'HEAD'], timeoutMs);
    if (head.code !== 0) return { found: false, reason: `${path} has no default branch (HEAD)` };
    full = head.stdout.trim();
  } else {
    full = ref.startsWith('refs/') ? ref : `refs/heads/${ref}`;
  }
  const short = full.replace(/^refs\/(heads|tags)\//, '');
  if (!REF_NAME.test(short) || !/^refs\/(heads|tags)\//.test(full)) {
    return { found: false, reason: `${JSON.stringify(ref)} is not a branch or tag name` };
  }
  const kind = full.startsWith('refs/tags/') ? 'tag' : 'branch';
  const rev = await git(path, ['rev-parse', '--verify', '--quiet', `${full}^{commit}`], timeoutMs);
  if (rev.code === 1) return { found: false, reason: `${kind} ${short} does not exist in ${path}` };
  if (rev.code !== 0) {
    return {
      found: false,
      reason: `cannot read the git repository at ${path}: ${rev.stderr.trim()}`,
    };
  }
  return { found: true, ref: full, sha: rev.stdout.trim().toLowerCase() };
}

function git(
  path: string,
  args: string[],
  timeoutMs: number,
): Promise<{ code: number; stdout: string; stderr: string }> {
  // As lib/forge/pipeline-file.ts reads files: no inherited GIT_* variable
  // points git elsewhere, and it does not climb out of `path`.
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (!key.startsWith('GIT_')) env[key] = value;
  }
  env.GIT_CEILING_DIRECTORIES = dirname(path);
  env.GIT_TERMINAL_PROMPT = '0';
  env.LC_ALL = 'C';
  return new Promise((done) => {
    execFile('git', ['-C', path, ...args], { env, timeout: timeoutMs }, (error, stdout, stderr) => {
      if (!error) return done({ code: 0, stdout, stderr });
      const code = (error as NodeJS.ErrnoException).code;
      if (error.killed) {
        done({ code: -1, stdout: '', stderr: `git did not answer within ${timeoutMs} ms` });
      } else {
        done({
          code: typeof code === 'number' ? code : -1,
          stdout,
          stderr: stderr || error.message,
        });
      }
    });
  });
}
