/** What started a job: the ref it runs for, and for a pull request the branch it merges into. */
export interface Trigger {
  /** `refs/heads/main`, `refs/tags/v1.2`, or for a pull request `refs/pull/N/head`. */
  ref: string;
  event: 'push' | 'tag' | 'pull_request' | 'manual' | 'rerun' | 'schedule';
  /** For a pull request, the base branch: `main` or `refs/heads/main`. */
  baseRef?: string | null;
  /** For a scheduled job, the schedule's name (`when: {schedule: [...]}`). */
  schedule?: string | null;
  /** The inputs a manual or scheduled job was given, checked against `inputs:` (lib/pipeline/inputs.ts). */
  inputs?: Readonly<Record<string, unknown>> | null;
  /**
   * The names N of the `org:N` groups the project's pipelines may use
   * (`org_groups`); a pipeline naming another is an error. Absent: not
   * checked (`validate`, which knows no project).
   */
  orgGroups?: readonly string[] | null;
}

/**
 * Matches text against a pattern where `*` is any run of characters (including none and `/`)
 * and every other character stands for itself. Greedy two-pointer matching with backtracking to
 * the last star: no regular expression, so no metacharacter surprises and no catastrophic
 * backtracking on hostile patterns.
 */
export function globMatch(pattern: string, text: string): boolean {
  let p = 0;
  let t = 0;
  let star = -1;
  let resume = 0;
  while (t < text.length) {
    if (p < pattern.length && pattern[p] === '*') {
      star = p++;
      resume = t;
    } else if (p < pattern.length && pattern[p] === text[t]) {
      p++;
      t++;
    } else if (star >= 0) {
      p = star + 1;
      t = ++resume;
    } else {
      return false;
    }
  }
  while (pattern[p] === '*') p++;
  return p === pattern.length;
}

// A ref in its full and short forms; a bare name (no `refs/`) is taken as a branch.
function refForms(ref: string): string[] {
  if (ref.startsWith('refs/heads/')) return [ref, ref.slice('refs/heads/'.length)];
  if (ref.startsWith('refs/tags/')) return [ref, ref.slice('refs/tags/'.length)];
  if (ref.startsWith('refs/')) return [ref];
  return [`refs/heads/${ref}`, ref];
}

/** The strings an `only` pattern is tried against for a trigger. */
export function triggerRefs(trigger: Trigger): string[] {
  const ref = typeof trigger.ref === 'string' ? trigger.ref : '';
  if (trigger.event !== 'pull_request') return refForms(ref);
  // A pull request runs for the branch it merges into, or can be picked out by its own ref.
  const refs = [ref];
  if (typeof trigger.baseRef === 'string' && trigger.baseRef !== '') {
    refs.push(...refForms(trigger.baseRef));
  }
  return refs;
}

/** Tells whether an `only` pattern selects this trigger (full ref or short name). */
export function refMatches(pattern: string, trigger: Trigger): boolean {
  return triggerRefs(trigger).some((ref) => globMatch(pattern, ref));
}
