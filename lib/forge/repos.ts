// The repositories a token can see on a forge, for adding one as a project from the page
// (lib/app/onboarding.ts): paged through the forge's list (Forge.repos), each page read as every
// forge answer is read (lib/forge/json.ts), and bounded: at most `maxPages` pages of `perPage`.
import { DEFAULT_TIMEOUT_MS } from './client.ts';
import type { ForgeKind, RepoListing } from './forge.ts';
import { askJson } from './json.ts';
import { forgeOf } from './registry.ts';

export type { RepoListing } from './forge.ts';

/** Most repositories one listing reads (4 pages of 50): past it, the listing says it stopped. */
export const MAX_LISTED_REPOS = 200;
const PER_PAGE = 50;

export interface RepoQuestion {
  forge: ForgeKind;
  /** The forge's API base (Forge.apiBase). */
  api: string;
  token: string;
  timeoutMs?: number;
}

/**
 * The token's repositories, in the forge's order: `truncated` when there were more than
 * MAX_LISTED_REPOS, `reason` when the forge refused (the list is then what was read before).
 * A forge that cannot be reached is a ForgeUnavailableError.
 */
export async function listRepositories(
  q: RepoQuestion,
): Promise<{ repos: RepoListing[]; truncated: boolean; reason: string | null }> {
  const forge = forgeOf(q.forge);
  const repos: RepoListing[] = [];
  const pages = Math.ceil(MAX_LISTED_REPOS / PER_PAGE);
  for (let page = 1; page <= pages; page++) {
    const answer = await askJson(
      {
        forge,
        token: q.token,
        repo: 'the repository list',
        timeoutMs: q.timeoutMs ?? DEFAULT_TIMEOUT_MS,
        maxBytes: 8 * 1024 * 1024,
      },
      forge.repos.list(q.api, page, PER_PAGE),
      `the repositories its token can see (page ${page})`,
      { accessHint: false },
    );
    if (!answer.ok) return { repos, truncated: false, reason: answer.reason };
    if (!Array.isArray(answer.body)) {
      return {
        repos,
        truncated: false,
        reason: `${forge.title} did not answer a list of repositories`,
      };
    }
    for (const item of answer.body.slice(0, PER_PAGE)) {
      const read = forge.repos.read(item);
      if (read && forge.isRepo(read.repo)) repos.push(read);
    }
    if (answer.body.length < PER_PAGE) return { repos, truncated: false, reason: null };
  }
  return { repos, truncated: true, reason: null };
}

/** One repository as the token sees it; a reason when the forge refused or does not know it. */
export async function readRepository(
  q: RepoQuestion & { repo: string },
): Promise<{ ok: true; repo: RepoListing } | { ok: false; reason: string }> {
  const forge = forgeOf(q.forge);
  const answer = await askJson(
    { forge, token: q.token, repo: q.repo, timeoutMs: q.timeoutMs ?? DEFAULT_TIMEOUT_MS },
    forge.branch.repository(q.api, q.repo),
    `repository ${q.repo}`,
    { notFound: `${forge.title} has no repository ${q.repo} that Conductor's token can see` },
  );
  if (!answer.ok) return answer;
  const read = forge.repos.read(answer.body);
  if (!read) return { ok: false, reason: `${forge.title} did not describe ${q.repo}` };
  return { ok: true, repo: read };
}
