// Changed-path filters (`changes:` on a task): which files a push or pull
// request must change for the task to run. Pure: the file list is the app's to
// find (lib/app/changes.ts); this module reads the syntax and matches.
//
// Paths are matched by pathglob.ts (`*` stays within a directory, `**` crosses
// them, dot files match like any other), in bounded steps: never a regular
// expression a pattern could make backtrack. Ref patterns (`only:`) keep their
// own matcher in glob.ts: there `*` crosses `/` and nothing else is special,
// and pipelines written for it must keep meaning what they meant.
import * as z from '../zod.ts';
import { describeValue, quote } from './messages.ts';
import { MAX_MATCHED_PATH, MatchBudget, pathMatcher, pathPatternProblem } from './pathglob.ts';

/** Most patterns one task's `changes:` may list. */
export const MAX_CHANGE_PATTERNS = 100;

/** A task's changed-path filter as compiled: it runs when a changed file matches an include and no exclude. */
export interface CompiledChanges {
  include: string[];
  exclude: string[];
}

const PatternSchema = z.string().check(
  z.minLength(1, 'a path pattern must not be empty'),
  z.maxLength(500, 'a path pattern must be at most 500 characters'),
  z.refine((pattern) => pattern !== '!', 'a path pattern must not be "!" alone'),
  z.superRefine((pattern, ctx) => {
    const problem = pathPatternProblem(pattern.startsWith('!') ? pattern.slice(1) : pattern);
    if (problem !== null) ctx.addIssue({ code: 'custom', message: problem, input: pattern });
  }),
);

const PatternListSchema = z
  .array(PatternSchema)
  .check(z.maxLength(MAX_CHANGE_PATTERNS, `must list at most ${MAX_CHANGE_PATTERNS} patterns`));

/** `changes: ["src/**", "!src/**\/*.md"]` or `changes: {include: [...], exclude: [...]}`. */
export const ChangesInputSchema = z.union(
  [
    PatternListSchema.check(z.minLength(1, 'must list at least one path pattern')),
    z.strictObject({
      include: z.optional(
        PatternListSchema.check(z.minLength(1, 'must list at least one path pattern')),
      ),
      exclude: z.optional(PatternListSchema),
    }),
  ],
  {
    error: (issue) =>
      issue.input === undefined
        ? undefined
        : `expected a path pattern, a list of them or a map of include and exclude, got ${describeValue(issue.input)}`,
  },
);

/** `changes:` as written: ChangesInputSchema, or one pattern alone (`changes: src/**`, as `only:` takes one branch). */
export const ChangesSchema = z.pipe(
  z.pipe(
    z.transform((value) => (typeof value === 'string' ? [value] : value)),
    ChangesInputSchema,
  ),
  z.transform((changes: z.output<typeof ChangesInputSchema>): CompiledChanges => {
    if (Array.isArray(changes)) {
      const include = changes.filter((p) => !p.startsWith('!'));
      const exclude = changes.filter((p) => p.startsWith('!')).map((p) => p.slice(1));
      return { include: include.length > 0 ? include : ['**'], exclude };
    }
    return { include: changes.include ?? ['**'], exclude: changes.exclude ?? [] };
  }),
);

/**
 * Steps of matching one compile may spend on its `changes:` filters (a step
 * is one pattern character against one path character): a few milliseconds
 * for any real pipeline, well under a second for the worst a pipeline file can
 * hold. Past it the diff counts as unknown (lib/app/changes.ts).
 */
export const CHANGES_MATCH_STEPS = 20_000_000;

/**
 * Tells whether a file list makes a task with this filter run: some file
 * matches an include and no exclude. A path longer than MAX_MATCHED_PATH is
 * not matched and runs the task, as an unknown diff would. Throws
 * MatchBudgetError when the budget runs out.
 */
export function changesMatch(
  changes: CompiledChanges,
  files: readonly string[],
  budget: MatchBudget = new MatchBudget(CHANGES_MATCH_STEPS),
): boolean {
  const include = pathMatcher(changes.include, budget);
  const exclude = changes.exclude.length > 0 ? pathMatcher(changes.exclude, budget) : null;
  return files.some(
    (file) => file.length > MAX_MATCHED_PATH || (include(file) && !(exclude?.(file) ?? false)),
  );
}

/** Why a task with this filter was left out: `no changed file matches src/**` (excludes named too). */
export function changesSkipReason(changes: CompiledChanges): string {
  const shown = (list: string[]) =>
    list.length <= 3
      ? list.join(', ')
      : `${list.slice(0, 3).join(', ')} (and ${list.length - 3} more)`;
  const but = changes.exclude.length > 0 ? ` outside ${shown(changes.exclude)}` : '';
  return `no changed file matches ${shown(changes.include)}${but}`;
}

/** The filter as written back for a message: `"src/**", "!docs/**"`. */
export function describeChanges(changes: CompiledChanges): string {
  return [...changes.include.map(quote), ...changes.exclude.map((p) => quote(`!${p}`))].join(', ');
}
