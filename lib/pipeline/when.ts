// `when:` on a task: which outcomes of its needs let it run (`always`,
// `on_failure`, `on_success`, the default), and which triggers and schedules
// it runs for (`{trigger: [schedule], schedule: [nightly]}`), next to `only`,
// which filters refs. docs/pipeline.md, "`when`".

import { JOB_TRIGGERS, TASK_RUN_WHEN, type TaskRunWhen } from '../states.ts';
import * as z from '../zod.ts';
import { globMatch, type Trigger } from './glob.ts';
import { describeValue, Suggester } from './messages.ts';

const StatusSchema = z.enum(TASK_RUN_WHEN, {
  error: (issue) =>
    issue.input === undefined
      ? undefined
      : `must be ${TASK_RUN_WHEN.join(', ')}, got ${describeValue(issue.input)}`,
});

const TriggerNameSchema = z.enum(JOB_TRIGGERS, {
  error: (issue) =>
    issue.input === undefined
      ? undefined
      : `${describeValue(issue.input)} is not a trigger (${JOB_TRIGGERS.join(', ')})`,
});

function oneOrList<T extends z.ZodMiniType>(item: T, what: string) {
  return z.pipe(
    z.union([item, z.array(item).check(z.minLength(1, `must list at least one ${what}`))], {
      error: (issue) =>
        issue.input === undefined
          ? undefined
          : `expected a ${what} or a list of them, got ${describeValue(issue.input)}`,
    }),
    z.transform((v) => (Array.isArray(v) ? v : [v]) as z.infer<T>[]),
  );
}

const WhenMapSchema = z.strictObject({
  status: z.optional(StatusSchema),
  trigger: z.optional(oneOrList(TriggerNameSchema, 'trigger')),
  schedule: z.optional(
    oneOrList(z.string().check(z.minLength(1, 'must not be empty')), 'schedule name'),
  ),
});

/** `when:` as written: a status, or a map of `status`, `trigger` and `schedule`. */
export const WhenSchema = z.union([StatusSchema, WhenMapSchema], {
  error: (issue) =>
    issue.input === undefined
      ? undefined
      : `expected ${TASK_RUN_WHEN.join(', ')} or a map of status, trigger and schedule, got ${describeValue(issue.input)}${
          // One word against three: bounded without the compile's suggestion budget.
          typeof issue.input === 'string' ? new Suggester().suggest(issue.input, TASK_RUN_WHEN) : ''
        }`,
});
export type When = z.infer<typeof WhenSchema>;

/** The task's run condition: `when:`'s status, `on_success` when it names none. */
export function runWhenOf(when: When | undefined): TaskRunWhen {
  if (when === undefined) return 'on_success';
  if (typeof when === 'string') return when;
  return when.status ?? 'on_success';
}

/**
 * Whether `when:`'s trigger filter lets the task into a job for `trigger`: its
 * `trigger` list names the job's trigger, and its `schedule` list (patterns,
 * `*` any run of characters) names the schedule that fired it. A `schedule`
 * list without `trigger` means scheduled jobs only.
 */
export function whenMatches(when: When | undefined, trigger: Trigger): boolean {
  if (when === undefined || typeof when === 'string') return true;
  if (when.trigger && !when.trigger.includes(trigger.event)) return false;
  if (when.schedule) {
    if (trigger.event !== 'schedule' || !trigger.schedule) return false;
    const name = trigger.schedule;
    if (!when.schedule.some((pattern) => globMatch(pattern, name))) return false;
  }
  return true;
}

/** Why `when:` leaves a task out of a job for `trigger`, in words; null when it does not. */
export function whenLeavesOut(when: When | undefined, trigger: Trigger): string | null {
  if (whenMatches(when, trigger) || when === undefined || typeof when === 'string') return null;
  const parts: string[] = [];
  if (when.trigger) parts.push(`trigger: ${when.trigger.join(', ')}`);
  if (when.schedule) parts.push(`schedule: ${when.schedule.join(', ')}`);
  const what =
    trigger.event === 'schedule' && trigger.schedule
      ? `schedule ${trigger.schedule}`
      : trigger.event;
  return `when: {${parts.join('; ')}} does not match ${what}`;
}
