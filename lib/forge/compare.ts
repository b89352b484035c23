// The files changed between two commits, for `changes:` filters: asked of the
// forge's compare API (GitHub's and Gitea's, paged until the forge says there
// is no next page) or, for a repository on this machine, of git. One entry per
// forge in COMPARE; a new forge is one more entry.
//
// `base...head` with three dots everywhere: the files changed on head since
// its merge base with base. For a plain push base is an ancestor of head, so
// that is the push's own diff.
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

export interface CompareSource {
  forge: Forge;
  /** `owner/name` on the forge. */
  repo: string;
  repoUrl: string;
  forgeUrl: string | null;
  githubApiUrl: string;
  token: string | null;
}

/**
 * The changed files, each once, in the order first seen; or `known: false`
 * with why they could not be had for good (the run then treats the diff as
 * unknown). What may pass (a timeout, a 5xx, a rate limit) is a
 * ForgeUnavailableError instead, so the compile is retried.
 */
export type CompareResult = { known: true; files: string[] } | { known: false; reason: string };

/** Most pages of one comparison asked for: 100 commits a page, so 50,000 commits. */
export const MAX_COMPARE_PAGES = 500;

// GitHub lists at most this many files for a whole comparison (on its first
// page); a comparison that reaches it may have more, so it is not trusted as
// complete. A forge that pages its files past it is read to the end.
const GITHUB_FILE_CAP = 300;

interface CompareApi {
  /** The URL of one page of `base...head`. */
  url(api: string, repo: string, base: string, head: string, page: number): string;
  /** The file names on one page's answer; null when the answer is not a comparison. */
  files(body: unknown): string[] | null;
  /** When the files of one page reach the forge's cap on the comparison, so more may be missing. */
  capped(pageFiles: number, page: number): boolean;
}

const enc = (repo: string) => repo.split('/').map(encodeURIComponent).join('/');
const basehead = (base: string, head: string) =>
  `${encodeURIComponent(base)}...${encodeURIComponent(head)}`;

function names(list: unknown, renamedFrom: string | null): string[] | null {
  if (!Array.isArray(list)) return null;
  const out: string[] = [];
  for (const item of list) {
    const name = (item as { filename?: unknown } | null)?.filename;
    if (typeof name !== 'string') return null;
    out.push(name);
    // A rename changes its old path too: a filter on the old place must see it.
    const old = renamedFrom ? (item as Record<string, unknown>)[renamedFrom] : undefined;
    if (typeof old === 'string' && old !== '') out.push(old);
  }
  return out;
}

const COMPARE: Readonly<Record<Forge, CompareApi>> = {
  github: {
    url: (api, repo, base, head, page) =>
      `${api}/repos/${enc(repo)}/compare/${basehead(base, head)}?per_page=100&page=${page}`,
    files: (body) => {
      const list = (body as { files?: unknown } | null)?.files;
      // A page past the first may carry no files at all.
      return list === undefined ? [] : names(list, 'previous_filename');
    },
    capped: (pageFiles) => pageFiles >= GITHUB_FILE_CAP,
  },
  gitea: {
    url: (api, repo, base, head, page) =>
      `${api}/repos/${enc(repo)}/compare/${basehead(base, head)}?limit=50&page=${page}`,
    files: (body) => {
      const top = (body as { files?: unknown } | null)?.files;
      if (top !== undefined) return names(top, 'previous_filename');
      // Older Gitea answers the commits, each with the files it touched.
      const commits = (body as { commits?: unknown } | null)?.commits;
      if (!Array.isArray(commits)) return null;
      const out: string[] = [];
      for (const commit of commits) {
        const files = names((commit as { files?: unknown } | null)?.files ?? [], null);
        if (files === null) return null;
        out.push(...files);
      }
      return out;
    },
    capped: () => false,
  },
};

/** The files changed on `head` since its merge base with `base` (shas or branch names). */
export async function changedFiles(
  src: CompareSource,
  base: string,
  head: string,
  opts: { timeoutMs?: number } = {},
): Promise<CompareResult> {
  const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  if (isLocalRepo(src.repoUrl)) return filesFromGit(src.repoUrl, base, head, timeoutMs);
  const api = apiBase(src.forge, { githubApiUrl: src.githubApiUrl, forgeUrl: src.forgeUrl });
  if (api === null) {
    return { known: false, reason: 'the project has no forge_url: the Gitea base URL is needed' };
  }
  const table = COMPARE[src.forge];
  const forge = forgeName(src.forge);
  const seen = new Set<string>();
  for (let page = 1; page <= MAX_COMPARE_PAGES; page++) {
    const answer = await getPage(src, table.url(api, src.repo, base, head, page), timeoutMs);
    if (!answer.ok) return { known: false, reason: answer.reason };
    const files = table.files(answer.body);
    if (files === null) {
      return { known: false, reason: `${forge}'s compare answer for ${src.repo} lists no files` };
    }
    if (table.capped(files.length, page)) {
      return {
        known: false,
        reason: `${forge}'s compare of ${base}...${head} stops at ${files.length} files, its cap, so some may be missing`,
      };
    }
    for (const file of files) seen.add(file);
    if (!hasNextPage(answer.link)) return { known: true, files: [...seen] };
  }
  return {
    known: false,
    reason: `the comparison of ${base}...${head} has more than ${MAX_COMPARE_PAGES} pages`,
  };
}

// RFC 8288 as both forges send it: `<url>; rel="next", <url>; rel="last"`.
function hasNextPage(link: string | null): boolean {
  return link !== null && /;\s*rel="?next"?/.test(link);
}

async function getPage(
  src: CompareSource,
  url: string,
  timeoutMs: number,
): Promise<{ ok: true; body: unknown; link: string | null } | { ok: false; reason: string }> {
  const forge = forgeName(src.forge);
  const what = `the compare API of ${src.repo}`;
  let answer: ForgeAnswer;
  try {
    // Up to 8 MiB a page: GitHub's first page carries every file's patch.
    answer = await callForge({
      url,
      headers: forgeHeaders(src.forge, src.token),
      timeoutMs,
      maxBytes: 8 * 1024 * 1024,
    });
  } catch (error) {
    if (error instanceof ForgeRefusedError) return { ok: false, reason: error.message };
    if (error instanceof ForgeTransportError) {
      throw new ForgeUnavailableError(
        `${forge} could not be reached asking for ${what} (${transportErrorText(error, timeoutMs)})`,
        { cause: error },
      );
    }
    throw error;
  }
  if (answer.kind === 'ok') {
    if (answer.body === null)
      return { ok: false, reason: `${forge}'s answer from ${what} was too large` };
    try {
      return {
        ok: true,
        body: JSON.parse(answer.body.toString('utf8')),
        link: answer.headers.get('link'),
      };
    } catch {
      return { ok: false, reason: `${forge} answered ${what} with something not JSON` };
    }
  }
  if (answer.kind === 'rate_limited' || answer.kind === 'retryable') {
    throw new ForgeUnavailableError(`${forge} answered HTTP ${answer.status} asking for ${what}`);
  }
  return { ok: false, reason: `${forge} answered HTTP ${answer.status} asking for ${what}` };
}

// A commit or branch git accepts, refused before git sees anything that could
// read as an option.
const REV = /^(?!-)(?!.*\.\.)[A-Za-z0-9._/-]{1,255}$/;

async function filesFromGit(
  repoUrl: string,
  base: string,
  head: string,
  timeoutMs: number,
): Promise<CompareResult> {
  let path: string;
  try {
    path = /^file:\/\//i.test(repoUrl) ? fileURLToPath(repoUrl) : resolve(repoUrl);
  } catch (error) {
    return { known: false, reason: `${repoUrl} is not a usable file URL: ${String(error)}` };
  }
  if (!REV.test(base) || !REV.test(head)) {
    return { known: false, reason: `${base}...${head} is not a comparison git can make` };
  }
  const out = await git(
    path,
    ['diff', '--name-only', '--no-renames', '-z', `${base}...${head}`, '--'],
    timeoutMs,
  );
  if (out.code !== 0) {
    return {
      known: false,
      reason: `git could not compare ${base}...${head}: ${out.stderr.trim()}`,
    };
  }
  return { known: true, files: [...new Set(out.stdout.split('\0').filter(Boolean))] };
}

function git(
  path: string,
  args: string[],
  timeoutMs: number,
): Promise<{ code: number; stdout: string; stderr: string }> {
  // As lib/forge/pipeline-file.ts runs git: no inherited GIT_* variable points
  // it elsewhere, and it does not climb out of `path`.
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (!key.startsWith('GIT_')) env[key] = value;
  }
  env.GIT_CEILING_DIRECTORIES = dirname(path);
  env.GIT_TERMINAL_PROMPT = '0';
  env.LC_ALL = 'C';
  return new Promise((done) => {
    execFile(
      'git',
      ['-C', path, ...args],
      { env, timeout: timeoutMs, maxBuffer: 64 * 1024 * 1024 },
      (error, stdout, stderr) => {
        if (!error) return done({ code: 0, stdout, stderr });
        const code = (error as NodeJS.ErrnoException).code;
        done({
          code: typeof code === 'number' ? code : -1,
          stdout,
          stderr: error.killed
            ? `git did not answer within ${timeoutMs} ms`
            : stderr || error.message,
        });
      },
    );
  });
}
