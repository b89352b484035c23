// Concurrency groups (`concurrency:` on a task): how many tasks of one group
// may run at once, across jobs, and what a newer job does to the older ones
// waiting or running in it. Pure: the group's name is resolved here; the
// claim statement enforces the limit (migrations/functions/conductor_claim.sql).
import * as z from '../zod.ts';
import type { Trigger } from './glob.ts';

/** What a group does when a newer job's task joins it. */
export const CONCURRENCY_MODES = ['queue', 'replace_pending', 'cancel_running'] as const;
export type ConcurrencyMode = (typeof CONCURRENCY_MODES)[number];

/** Most tasks of one group a limit may allow at once. */
export const MAX_CONCURRENCY_LIMIT = 1000;

/** `concurrency: {group, limit, mode}`. */
export const ConcurrencyObjectSchema = z.strictObject({
  group: z.string().check(
    z.minLength(1, 'must not be empty'),
    z.maxLength(200, 'must be at most 200 characters'),
    z.regex(/^\P{Cc}*$/u, 'must be one line without control characters'),
    z.refine((group) => group !== 'org:', 'an org: group needs a name after org:'),
  ),
  limit: z.optional(z.number().check(z.int(), z.gte(1), z.lte(MAX_CONCURRENCY_LIMIT))),
  mode: z.optional(z.enum(CONCURRENCY_MODES)),
});

/** `concurrency:` as written: the map, or the group alone (`concurrency: deploy`, as GitHub Actions writes it). */
export const ConcurrencySchema = z.pipe(
  z.transform((value) => (typeof value === 'string' ? { group: value } : value)),
  ConcurrencyObjectSchema,
);

/** A task's group as stored: its name (lower case, `${CONDUCTOR_REF}` filled in), limit and mode. */
export interface CompiledConcurrency {
  /** `deploy-main`, or `org:deploy` for a group spanning every project. */
  group: string;
  limit: number;
  mode: ConcurrencyMode;
}

// The ref as a group names it: a branch or tag by its short name, anything else whole.
function shortRef(ref: string): string {
  return ref.replace(/^refs\/(heads|tags)\//, '');
}

/**
 * The group a task joins for this trigger: `${CONDUCTOR_REF}` (or `${ref}`)
 * becomes the ref's short name, and the name is lower-cased (groups are
 * case-insensitive).
 */
export function compileConcurrency(
  spec: z.infer<typeof ConcurrencyObjectSchema> | undefined,
  trigger: Trigger,
): CompiledConcurrency | null {
  if (!spec) return null;
  const ref = shortRef(typeof trigger.ref === 'string' ? trigger.ref : '');
  const group = spec.group
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the placeholder as the pipeline writes it
    .replaceAll('${CONDUCTOR_REF}', ref)
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the placeholder as the pipeline writes it
    .replaceAll('${ref}', ref)
    .toLowerCase();
  return { group, limit: spec.limit ?? 1, mode: spec.mode ?? 'queue' };
}
