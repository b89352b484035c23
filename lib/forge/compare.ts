// The files changed between two commits, for `changes:` filters: asked of the
// project's forge's compare API (its module says where and how to read an
// answer: Forge.compare), paged until the forge says there is no next page,
// or, for a repository on this machine, of git.
//
// `base...head` with three dots everywhere: the files changed on head since
// its merge base with base. For a plain push base is an ancestor of head, so
// that is the push's own diff.
import { execFile } from 'node:child_process';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DEFAULT_TIMEOUT_MS } from './client.ts';
import type { ForgeKind } from './forge.ts';
import { askJson } from './json.ts';
import { isLocalRepo } from './pipeline-file.ts';
import { forgeOf } from './registry.ts';

export interface CompareSource {
  forge: ForgeKind;
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

/**
 * Most changed file names one comparison keeps, and most characters in them
 * all: what a hostile or broken forge can make one compile hold (each page is
 * parsed and dropped; these names are kept across pages). Past either, the
 * diff counts as unknown and every task runs (docs/limits.md).
 */
export const MAX_COMPARE_FILES = 20_000;
export const MAX_COMPARE_CHARS = 4_000_000;

/** The files changed on `head` since its merge base with `base` (shas or branch names). */
export async function changedFiles(
  src: CompareSource,
  base: string,
  head: string,
  opts: { timeoutMs?: number } = {},
): Promise<CompareResult> {
  const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  if (isLocalRepo(src.repoUrl)) return filesFromGit(src.repoUrl, base, head, timeoutMs);
  const forge = forgeOf(src.forge);
  const api = forge.apiBase({ githubApiUrl: src.githubApiUrl, forgeUrl: src.forgeUrl });
  if (api === null) {
    return {
      known: false,
      reason: `the project has no forge_url: the ${forge.title} base URL is needed`,
    };
  }
  const what = `the compare API of ${src.repo}`;
  // Up to 8 MiB a page: GitHub's first page carries every file's patch.
  const ask = { forge, token: src.token, repo: src.repo, timeoutMs, maxBytes: 8 * 1024 * 1024 };
  const seen = new Set<string>();
  let chars = 0;
  for (let page = 1; page <= MAX_COMPARE_PAGES; page++) {
    const answer = await askJson(ask, forge.compare.page(api, src.repo, base, head, page), what, {
      accessHint: false,
    });
    if (!answer.ok) return { known: false, reason: answer.reason };
    const files = forge.compare.files(answer.body);
    if (files === null) {
      return {
        known: false,
        reason: `${forge.title}'s compare answer for ${src.repo} lists no files`,
      };
    }
    const short = forge.compare.incomplete(answer.body, files.length, page);
    if (short !== null) {
      return {
        known: false,
        reason: `${forge.title}'s compare of ${base}...${head} ${short}`,
      };
    }
    for (const file of files) {
      if (seen.has(file)) continue;
      seen.add(file);
      chars += file.length;
      if (seen.size > MAX_COMPARE_FILES || chars > MAX_COMPARE_CHARS) {
        return {
          known: false,
          reason: `the comparison of ${base}...${head} changes more than ${seen.size > MAX_COMPARE_FILES ? `${MAX_COMPARE_FILES} files` : `${MAX_COMPARE_CHARS} characters of file names`}, more than Conductor keeps`,
        };
      }
    }
    if (!hasNextPage(answer.link)) return { known: true, files: [...seen] };
  }
  return {
    known: false,
    reason: `the comparison of ${base}...${head} has more than ${MAX_COMPARE_PAGES} pages`,
  };
}

// RFC 8288 as GitHub and Gitea send it (GitLab's compare is one answer, with no Link): `<url>; rel="next", <url>; rel="last"`.
function hasNextPage(link: string | null): boolean {
  return link !== null && /;\s*rel="?next"?/.test(link);
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
