// Which jobs a notification's `branches` select: path-glob patterns
// (lib/pipeline/pathglob.ts, the matcher `changes:` and artifact paths use,
// linear in pattern × name) tried against the job's branch name and its full
// ref, so `main`, `release/*`, `refs/tags/v*` all read as a person expects.
import { MatchBudget, pathMatcher, pathPatternProblem } from '../pipeline/pathglob.ts';

/** Most patterns one notification may list. */
export const MAX_BRANCH_PATTERNS = 20;
// A few patterns against one ref: far below any honest use.
const MATCH_STEPS = 1_000_000;

/** Why `pattern` cannot be used as a branch pattern, or null when it can. */
export function branchPatternProblem(pattern: string): string | null {
  return pathPatternProblem(pattern);
}

/** The names a ref is tried under: `refs/heads/x/y` as itself and `x/y`; a pull request's also by its base branch. */
function refNames(ref: string, baseRef: string | null): string[] {
  const forms = (r: string) =>
    r.startsWith('refs/heads/')
      ? [r, r.slice('refs/heads/'.length)]
      : r.startsWith('refs/tags/')
        ? [r, r.slice('refs/tags/'.length)]
        : r.startsWith('refs/')
          ? [r]
          : [`refs/heads/${r}`, r];
  return [...forms(ref), ...(baseRef ? forms(baseRef) : [])];
}

/**
 * True when the job's ref (or a pull request's base branch) matches one of
 * `patterns`; no patterns select every job. A pattern that cannot be compiled
 * or runs out of steps selects nothing.
 */
export function branchSelected(
  patterns: readonly string[] | null,
  ref: string,
  baseRef: string | null,
): boolean {
  if (!patterns || patterns.length === 0) return true;
  try {
    const matches = pathMatcher(patterns, new MatchBudget(MATCH_STEPS));
    return refNames(ref, baseRef).some(matches);
  } catch {
    return false;
  }
}
