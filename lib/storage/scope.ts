// Where a job's caches are read from and written to. As GitHub scopes them:
// the job's own branch first, then a pull request's base branch, then the
// default branch; never a sibling branch. An untrusted job (a fork's pull
// request) reads its own isolated scope and then the trusted caches of its
// base and default branches, and writes only to its isolated scope, so a
// fork can never poison what trusted jobs restore.

/**
 * The branch whose caches every job of a project may read, while no webhook
 * has said the repository's default branch (projects.default_branch).
 */
export const DEFAULT_BRANCH_REF = 'refs/heads/main';

const UNTRUSTED = 'untrusted:';

/** What a job's cache scopes are decided from. */
export interface ScopeJob {
  ref: string;
  base_ref: string | null;
  trusted: boolean;
  /** The project's default branch (a name), null while unknown. */
  default_branch: string | null;
}

/** A ref as a branch ref (`main` → `refs/heads/main`); other refs as they are. */
function branchRef(ref: string): string {
  return ref.startsWith('refs/') ? ref : `refs/heads/${ref}`;
}

/** The scope a job's cache saves go to. */
export function writeScope(job: ScopeJob): string {
  return job.trusted ? job.ref : `${UNTRUSTED}${job.ref}`;
}

/** The scopes a job's restores look in, most specific first. */
export function readScopes(job: ScopeJob): string[] {
  const scopes = [writeScope(job)];
  if (job.base_ref) scopes.push(branchRef(job.base_ref));
  scopes.push(job.default_branch ? branchRef(job.default_branch) : DEFAULT_BRANCH_REF);
  return [...new Set(scopes)];
}

/** Whether entries of `scope` were written by trusted jobs. */
export function isTrustedScope(scope: string): boolean {
  return !scope.startsWith(UNTRUSTED);
}
