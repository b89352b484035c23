import { execFile } from 'node:child_process';
import { dirname, isAbsolute, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { MAX_PIPELINE_BYTES, PIPELINE_FILE } from '../pipeline/limits.ts';
import {
  callForge,
  DEFAULT_TIMEOUT_MS,
  type ForgeAnswer,
  ForgeRefusedError,
  ForgeTransportError,
  ForgeUnavailableError,
  forgeCall,
  transportErrorText,
} from './client.ts';
import type { Forge, ForgeKind } from './forge.ts';
import { forgeOf } from './registry.ts';

export { ForgeUnavailableError } from './client.ts';

// Reads the pipeline file of one commit: from the project's forge (its module names the file
// API: GitHub's contents, Gitea's raw file, GitLab's repository files), or with git from a
// repository on this machine (local development and demos).
//
// Every outcome is one of three kinds, because the caller acts differently on each:
// - the text;
// - `found: false` with a reason, for anything retrying will not fix (no file at that commit,
//   an unknown commit, a token the forge refuses, a path that is not a repository); the job
//   fails with the reason;
// - ForgeUnavailableError, for what may pass (network errors, timeouts, 5xx, rate limits); the
//   job stays pending and the compile is retried later.

export interface PipelineSource {
  forge: ForgeKind;
  /** `owner/name` on the forge (GitLab: `group/sub/name`). */
  repo: string;
  /** What runners clone; a local path or file:// URL is read with git instead of the forge's API. */
  repoUrl: string;
  /** The forge's base URL (Gitea's, GitLab's); unused for GitHub. */
  forgeUrl: string | null;
  /** GitHub's REST API base, e.g. `https://api.github.com` or `https://ghe.example/api/v3`. */
  githubApiUrl: string;
  token: string | null;
  sha: string;
}

export type FetchResult = { found: true; text: string } | { found: false; reason: string };

// Files over MAX_PIPELINE_BYTES still reach the compiler, which reports their exact size; past
// this bound they are not worth holding in memory to say so.
const MAX_READ_BYTES = 4 * MAX_PIPELINE_BYTES;

/** An absolute path, or a file:// URL: a repository read with git on this machine. */
export function isLocalRepo(repoUrl: string): boolean {
  return /^file:\/\//i.test(repoUrl) || isAbsolute(repoUrl);
}

/**
 * Reads `.conductor.yml` at the sha; with `path`, another file of the same commit, the same way
 * (a file the pipeline's `include:` names: a path from the repository root the compiler checked).
 */
export async function fetchPipelineFile(
  src: PipelineSource,
  opts: { timeoutMs?: number; path?: string } = {},
): Promise<FetchResult> {
  const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const file = opts.path ?? PIPELINE_FILE;
  if (isLocalRepo(src.repoUrl)) return readFromGit(src.repoUrl, src.sha, timeoutMs, file);
  const request = forgeRequest(src);
  if ('found' in request) return request;
  return readFromForge(src, request, timeoutMs, file);
}

const notFound = (sha: string, file: string): FetchResult => ({
  found: false,
  reason: `no ${file} at ${sha}`,
});

const tooLarge = (sha: string, file: string): FetchResult => ({
  found: false,
  reason: `${file} at ${sha} is larger than ${MAX_READ_BYTES / (1024 * 1024)} MiB`,
});

interface FileRequest {
  forge: Forge;
  /** The base URL as configured, named in error messages. */
  base: string;
  api: string;
}

function forgeRequest(src: PipelineSource): FileRequest | FetchResult {
  const forge = forgeOf(src.forge);
  if (!forge.isRepo(src.repo)) {
    return {
      found: false,
      reason: `the project's repo ${JSON.stringify(src.repo)} is not ${forge.repoShape}`,
    };
  }
  const api = forge.apiBase({ githubApiUrl: src.githubApiUrl, forgeUrl: src.forgeUrl });
  if (api === null) {
    return {
      found: false,
      reason: `the project has no forge_url: the ${forge.title} base URL is needed`,
    };
  }
  // GitHub is named by its API base; the others by the base URL the project gives.
  const base = forge.forgeUrl.required || forge.forgeUrl.default ? (src.forgeUrl ?? api) : api;
  return { forge, base: base.replace(/\/+$/, ''), api };
}

async function readFromForge(
  src: PipelineSource,
  request: FileRequest,
  timeoutMs: number,
  file: string,
): Promise<FetchResult> {
  const forge = `${request.forge.title} at ${request.base}`;
  const unavailable = (what: string, cause?: unknown) =>
    new ForgeUnavailableError(
      `${forge} ${what} while reading ${file} at ${src.sha}`,
      cause === undefined ? undefined : { cause },
    );
  let answer: ForgeAnswer;
  try {
    // One deadline for the answer and the body: a forge that trickles bytes
    // is as stuck as one that never answers.
    answer = await callForge(
      forgeCall(
        request.forge,
        src.token,
        request.forge.file(request.api, src.repo, src.sha, file),
        {
          timeoutMs,
          maxBytes: MAX_READ_BYTES,
        },
      ),
    );
  } catch (error) {
    // An address the control plane may not call, or a redirect: the
    // project's URL is wrong, and no retry fixes it.
    if (error instanceof ForgeRefusedError) return { found: false, reason: error.message };
    if (error instanceof ForgeTransportError) {
      const text = transportErrorText(error, timeoutMs);
      throw unavailable(
        error.phase === 'connect'
          ? `could not be reached (${text})`
          : `broke off its answer (${text})`,
        error,
      );
    }
    throw error;
  }

  const status = answer.status;
  if (answer.kind === 'ok') {
    if (answer.body === null) return tooLarge(src.sha, file);
    if (status === 200) return { found: true, text: answer.body.toString('utf8') };
  }
  // GitHub also answers 404 for a private repository the token cannot see; the reason cannot
  // tell the two apart, so it stays the plain fact.
  if (status === 404) return notFound(src.sha, file);
  if (answer.kind === 'rate_limited')
    throw unavailable(`rate-limited the request (HTTP ${status})`);
  if (answer.kind === 'retryable') throw unavailable(`answered HTTP ${status}`);
  // 401 and 403 are configuration problems (a missing, expired or under-scoped token) that no
  // retry fixes, so the job fails now with a reason that says what to change rather than
  // sitting pending until the sweep gives up.
  if (status === 401 || status === 403) {
    return {
      found: false,
      reason: `the forge refused access to ${src.repo} (HTTP ${status}): check the project's forge token`,
    };
  }
  // Any other answer (400, 422, ...) is the forge rejecting this request for good.
  return {
    found: false,
    reason: `${forge} answered HTTP ${status} for ${file} at ${src.sha}`,
  };
}

// Git accepts abbreviated names too; anything else could be read as an option or a revision
// expression, so it is refused before git sees it.
const GIT_SHA = /^[0-9a-fA-F]{4,64}$/;

async function readFromGit(
  repoUrl: string,
  sha: string,
  timeoutMs: number,
  file: string,
): Promise<FetchResult> {
  let path: string;
  try {
    path = /^file:\/\//i.test(repoUrl) ? fileURLToPath(repoUrl) : resolve(repoUrl);
  } catch (error) {
    return { found: false, reason: `${repoUrl} is not a usable file URL: ${errorText(error)}` };
  }
  if (!GIT_SHA.test(sha)) {
    return { found: false, reason: `${JSON.stringify(sha)} is not a commit sha` };
  }

  const commit = await runGit(
    path,
    ['rev-parse', '--verify', '--quiet', `${sha}^{commit}`],
    timeoutMs,
  );
  if (commit.kind !== 'exit') return gitFailure(commit, path, sha, timeoutMs, file);
  // With --quiet, an unknown or non-commit object exits 1 without a word; 128 is git giving up
  // on the repository itself (missing path, not a repository, unsafe ownership).
  if (commit.code === 1) return notFound(sha, file);
  if (commit.code !== 0) {
    return {
      found: false,
      reason: `cannot read the git repository at ${path}: ${firstLine(commit.stderr)}`,
    };
  }
  const full = commit.stdout.toString('utf8').trim();
  const blob = await runGit(path, ['cat-file', 'blob', `${full}:${file}`], timeoutMs);
  if (blob.kind !== 'exit') return gitFailure(blob, path, sha, timeoutMs, file);
  // The commit exists, so a failure here means no such file (or a directory by that name).
  if (blob.code !== 0) return notFound(sha, file);
  return { found: true, text: blob.stdout.toString('utf8') };
}

type GitRun =
  | { kind: 'exit'; code: number; stdout: Buffer; stderr: string }
  | { kind: 'missing' | 'timeout' | 'too_large' }
  | { kind: 'error'; error: unknown };

function gitFailure(
  run: Exclude<GitRun, { kind: 'exit' }>,
  path: string,
  sha: string,
  timeoutMs: number,
  file: string,
): FetchResult {
  switch (run.kind) {
    case 'missing':
      // Not something a retry fixes: the control plane's machine needs git installed.
      return {
        found: false,
        reason: `git is not installed here; it is needed to read the local repository ${path}`,
      };
    case 'timeout':
      // A slow disk or a huge repository may do better next time; let the caller retry.
      throw new ForgeUnavailableError(
        `git did not answer within ${timeoutMs} ms reading ${file} at ${sha} from ${path}`,
      );
    case 'too_large':
      return tooLarge(sha, file);
    case 'error':
      return { found: false, reason: `could not run git for ${path}: ${errorText(run.error)}` };
  }
}

function runGit(path: string, args: string[], timeoutMs: number): Promise<GitRun> {
  // A GIT_DIR or GIT_WORK_TREE inherited from the environment would point git at another
  // repository; the ceiling stops git from climbing out of `path` into an enclosing repository
  // when `path` itself is not one.
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (!key.startsWith('GIT_')) env[key] = value;
  }
  env.GIT_CEILING_DIRECTORIES = dirname(path);
  env.GIT_TERMINAL_PROMPT = '0';
  // Git's messages end up in job errors; keep them in one language.
  env.LC_ALL = 'C';
  return new Promise((done) => {
    execFile(
      'git',
      ['-C', path, ...args],
      { encoding: 'buffer', env, timeout: timeoutMs, maxBuffer: MAX_READ_BYTES, windowsHide: true },
      (error, stdout, stderr) => {
        if (!error) {
          done({ kind: 'exit', code: 0, stdout, stderr: stderr.toString('utf8') });
          return;
        }
        const code: unknown = (error as NodeJS.ErrnoException).code;
        if (code === 'ENOENT') done({ kind: 'missing' });
        else if (code === 'ERR_CHILD_PROCESS_STDIO_MAXBUFFER') done({ kind: 'too_large' });
        else if (error.killed) done({ kind: 'timeout' });
        else if (typeof code === 'number') {
          done({ kind: 'exit', code, stdout, stderr: stderr.toString('utf8') });
        } else done({ kind: 'error', error });
      },
    );
  });
}

function firstLine(text: string): string {
  const line = text.split('\n').find((l) => l.trim() !== '') ?? 'git failed without a message';
  return line.replace(/^fatal: /, '').trim();
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
