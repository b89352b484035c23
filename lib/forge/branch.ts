// A ref's head commit, asked of the project's forge (its module says where:
// Forge.branch) or, for a repository on this machine, of git: what a manual
// run without a sha and a schedule's tick run.
import { execFile } from 'node:child_process';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DEFAULT_TIMEOUT_MS } from './client.ts';
import type { ForgeKind } from './forge.ts';
import { askJson } from './json.ts';
import { isLocalRepo } from './pipeline-file.ts';
import { forgeOf } from './registry.ts';

export interface BranchSource {
  forge: ForgeKind;
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
  const forge = forgeOf(src.forge);
  const api = forge.apiBase({ githubApiUrl: src.githubApiUrl, forgeUrl: src.forgeUrl });
  if (api === null) {
    return {
      found: false,
      reason: `the project has no forge_url: the ${forge.title} base URL is needed`,
    };
  }
  const ask = { forge, token: src.token, repo: src.repo, timeoutMs };
  let name: string;
  let isTag = false;
  if (ref === null) {
    const repo = await askJson(
      ask,
      forge.branch.repository(api, src.repo),
      `the repository of ${src.repo}`,
      { notFound: `the repository does not exist in ${src.repo}`, accessHint: true },
    );
    if (!repo.ok) return { found: false, reason: repo.reason };
    const branch = (repo.body as { default_branch?: unknown } | null)?.default_branch;
    if (typeof branch !== 'string' || branch === '') {
      return {
        found: false,
        reason: `${forge.title} did not name ${src.repo}'s default branch`,
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
  const head = await askJson(
    ask,
    forge.branch.head(api, src.repo, name, isTag),
    `${what} of ${src.repo}`,
    {
      notFound: `${what} does not exist in ${src.repo}`,
      accessHint: true,
    },
  );
  if (!head.ok) return { found: false, reason: head.reason };
  const sha = forge.branch.sha(head.body);
  if (typeof sha !== 'string' || !SHA.test(sha.toLowerCase())) {
    return { found: false, reason: `${forge.title} answered no commit for ${what}` };
  }
  return { found: true, ref: full, sha: sha.toLowerCase() };
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
