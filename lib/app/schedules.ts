// Schedules (issue #29): the admin API's create, list, change and delete, and
// the tick that fires what is due. A tick asks the forge for the ref's head
// outside any transaction, then, in one transaction, takes the (schedule,
// tick) row, moves the schedule to its next tick and creates the job: two
// tickers racing make one job, and a crash leaves either all of it or none.
import type { AppContext } from '../context.ts';
import { SQLSTATE, sqlState, transaction, unavailability } from '../db/index.ts';
import { ConflictError, NotFoundError } from '../errors.ts';
import { type HeadResult, resolveHead } from '../forge/branch.ts';
import { ForgeUnavailableError } from '../forge/pipeline-file.ts';
import { openGate } from '../idle/gate.ts';
import { log } from '../log.ts';
import { ADMIN_BEARER } from '../people/sessions.ts';
import { createJobTx } from '../scheduler/jobs.ts';
import type { JobRow } from '../scheduler/types.ts';
import {
  CATCH_UP_NONE_GRACE_MS,
  cronProblem,
  jitterSeconds,
  latestTick,
  MAX_JITTER_S,
  nextDue,
  timezoneProblem,
} from '../schedules/cron.ts';
import {
  advanceSchedule,
  claimTick,
  type DueSchedule,
  deferSchedule,
  deleteSchedule,
  dueSchedules,
  getSchedule,
  insertSchedule,
  listSchedules,
  type NewSchedule,
  noteTickJob,
  type ScheduleRow,
  skipTickWithError,
  updateSchedule,
} from '../schedules/store.ts';
import { SCHEDULE_CATCH_UP } from '../states.ts';
import * as z from '../zod.ts';
import { audit, type Person } from './audit.ts';
import { projectToken } from './forge-token.ts';
import { InputValuesSchema } from './input-values.ts';
import { branchSource, getProject, getProjectRow } from './projects.ts';
import { triggerJob } from './trigger.ts';

export { InputValuesSchema } from './input-values.ts';

const NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/;

const RefSchema = z.string().check(
  z.minLength(1),
  z.maxLength(1024),
  z.refine((r) => !/\s/.test(r), 'must not contain white space'),
);

const CronSchema = z.string().check(
  z.trim(),
  z.minLength(1),
  z.maxLength(200),
  z.superRefine((cron, ctx) => {
    const problem = cronProblem(cron);
    if (problem) ctx.addIssue({ code: 'custom', message: problem });
  }),
);

const TimezoneSchema = z.string().check(
  z.minLength(1),
  z.maxLength(100),
  z.superRefine((tz, ctx) => {
    const problem = timezoneProblem(tz);
    if (problem) ctx.addIssue({ code: 'custom', message: problem });
  }),
);

export const ScheduleCreateSchema = z.strictObject({
  name: z
    .string()
    .check(
      z.regex(NAME, 'letters, digits, _, . and -, at most 63, starting with a letter or digit'),
    ),
  cron: CronSchema,
  timezone: z._default(TimezoneSchema, 'UTC'),
  ref: z.optional(z.nullable(RefSchema)),
  inputs: z._default(InputValuesSchema, {}),
  enabled: z._default(z.boolean(), true),
  catch_up: z._default(z.enum(SCHEDULE_CATCH_UP), 'latest'),
});
export type ScheduleCreate = z.infer<typeof ScheduleCreateSchema>;

export const ScheduleUpdateSchema = z.strictObject({
  cron: z.optional(CronSchema),
  timezone: z.optional(TimezoneSchema),
  ref: z.optional(z.nullable(RefSchema)),
  inputs: z.optional(InputValuesSchema),
  enabled: z.optional(z.boolean()),
  catch_up: z.optional(z.enum(SCHEDULE_CATCH_UP)),
});
export type ScheduleUpdate = z.infer<typeof ScheduleUpdateSchema>;

/** A schedule as the API answers it. */
export interface ScheduleView {
  name: string;
  project_id: string;
  cron: string;
  timezone: string;
  /** null: the repository's default branch. */
  ref: string | null;
  inputs: Record<string, string | number | boolean>;
  enabled: boolean;
  catch_up: string;
  /** The next tick as the cron expression says it; the job starts up to `jitter_s` later. */
  next_run_at: Date | null;
  jitter_s: number;
  last_run_at: Date | null;
  last_job_id: string | null;
  last_error: string | null;
  created_at: Date;
  updated_at: Date;
}

/** A stored schedule as the API shows it. */
export function scheduleView(row: ScheduleRow): ScheduleView {
  return {
    name: row.name,
    project_id: row.project_id,
    cron: row.cron,
    timezone: row.timezone,
    ref: row.ref,
    inputs: row.inputs,
    enabled: row.enabled,
    catch_up: row.catch_up,
    next_run_at: row.next_run_at,
    jitter_s: jitterSeconds(row.project_id, row.name),
    last_run_at: row.last_run_at,
    last_job_id: row.last_job_id,
    last_error: row.last_error,
    created_at: row.created_at,
    updated_at: row.updated_at,
  };
}

/** The settings with the next tick after `now` (none while disabled). */
function planned(
  projectId: string,
  s: Omit<NewSchedule, 'nextRunAt' | 'dueAt' | 'projectId'>,
  now: Date,
): NewSchedule {
  const due = s.enabled ? nextDue({ ...s, projectId }, now) : null;
  return { ...s, projectId, nextRunAt: due?.tick ?? null, dueAt: due?.dueAt ?? null };
}

/** Creates a schedule of the project (409 when the name is taken); `now` is the test's clock. */
export async function createSchedule(
  ctx: AppContext,
  projectId: string,
  input: ScheduleCreate,
  now = new Date(),
  by: Person = ADMIN_BEARER,
): Promise<ScheduleView> {
  await getProject(ctx.pool, projectId);
  const row = planned(
    projectId,
    {
      name: input.name,
      cron: input.cron,
      timezone: input.timezone,
      ref: input.ref ?? null,
      inputs: input.inputs,
      enabled: input.enabled,
      catchUp: input.catch_up,
    },
    now,
  );
  try {
    const created = await transaction(ctx.pool, (tx) => insertSchedule(tx, row));
    // A closed idle gate keeps the wake time of the work it last saw: open
    // it, and the sweep that closes it again wakes for this schedule too.
    await openGate(ctx.gate);
    await audit(ctx.pool, by, {
      projectId,
      action: 'schedule create',
      detail: `${input.name}: ${input.cron} (${input.timezone})`,
    });
    return scheduleView(created);
  } catch (err) {
    if (sqlState(err) === SQLSTATE.uniqueViolation) {
      throw new ConflictError(
        `project "${projectId}" has a schedule named "${input.name}" already`,
      );
    }
    throw err;
  }
}

/** The project's schedules (a 404 for a project that does not exist). */
export async function projectSchedules(
  ctx: AppContext,
  projectId: string,
): Promise<ScheduleView[]> {
  await getProject(ctx.pool, projectId);
  return (await listSchedules(ctx.pool, projectId)).map(scheduleView);
}

/**
 * Changes a schedule; its next tick is computed again from `now` when the
 * cron, time zone or enabled changed (a disabled schedule has none).
 */
export async function changeSchedule(
  ctx: AppContext,
  projectId: string,
  name: string,
  input: ScheduleUpdate,
  now = new Date(),
  by: Person = ADMIN_BEARER,
): Promise<ScheduleView> {
  await getProject(ctx.pool, projectId);
  const row = await transaction(ctx.pool, async (tx) => {
    const old = await getSchedule(tx, projectId, name, true);
    if (!old) throw new NotFoundError(`project "${projectId}" has no schedule named "${name}"`);
    const settings = {
      name,
      cron: input.cron ?? old.cron,
      timezone: input.timezone ?? old.timezone,
      ref: input.ref === undefined ? old.ref : input.ref,
      inputs: input.inputs ?? old.inputs,
      enabled: input.enabled ?? old.enabled,
      catchUp: input.catch_up ?? old.catch_up,
    };
    const retimed =
      settings.cron !== old.cron ||
      settings.timezone !== old.timezone ||
      settings.enabled !== old.enabled ||
      (settings.enabled && old.next_run_at === null);
    const next = retimed
      ? planned(projectId, settings, now)
      : { ...settings, projectId, nextRunAt: old.next_run_at, dueAt: old.due_at };
    return updateSchedule(tx, next);
  });
  // As on create: the gate's wake time is recomputed by the sweep that closes it.
  await openGate(ctx.gate);
  await audit(ctx.pool, by, {
    projectId,
    action: 'schedule update',
    detail: `${name}: ${Object.keys(input).join(', ') || 'nothing'}`,
  });
  return scheduleView(row);
}

/** Deletes a schedule (404 when it does not exist); its jobs stay. */
export async function removeSchedule(
  ctx: AppContext,
  projectId: string,
  name: string,
  by: Person = ADMIN_BEARER,
): Promise<void> {
  await getProject(ctx.pool, projectId);
  const gone = await transaction(ctx.pool, (tx) => deleteSchedule(tx, projectId, name));
  if (!gone) throw new NotFoundError(`project "${projectId}" has no schedule named "${name}"`);
  await audit(ctx.pool, by, { projectId, action: 'schedule delete', detail: name });
}

/** What one tick did, for the sweep's summary. */
export interface FireSummary {
  schedules_fired: number;
  schedules_skipped: number;
}

// Git's name for "no commit": the sha of a scheduled job whose ref has no head.
const NO_COMMIT = '0'.repeat(40);
const BATCH = 50;

/** A schedule the forge did not answer for is tried again after this at least... */
const RETRY_MIN_MS = 60_000;
/** ...and at most this (or at its next tick, if sooner). */
const RETRY_MAX_MS = 30 * 60_000;

/**
 * Fires the schedules due by `now` (the sweep's tick; tests pass their
 * clock): for each, the tick to fire (the latest one passed under
 * `catch_up: latest`, so a gap fires once; under `none`, a tick more than
 * five minutes late is skipped), the ref's head from the forge, then the job
 * in one transaction with the (schedule, tick) row. A schedule of a disabled
 * project moves on without firing. A ref with no head, or no forge access,
 * makes a failed job saying why and sets `last_error`. A forge that does not
 * answer sets `last_error` and defers the schedule, keeping its tick, with a
 * backoff (as long as the tick is late, 1 to 30 minutes, no later than its
 * next tick); deferred schedules come after the others, so they cannot
 * starve them. Any other failure sets `last_error` and moves the schedule to
 * its next tick. With `opts.deadline` (ms since the epoch, the sweep's), no
 * schedule is started once it has passed: the rest stay due for the next
 * sweep. The deadline is the sweep's "start nothing new" as for its other
 * steps; the time one fire may still take (a forge call, then a transaction)
 * is the caller's to leave after it (functions/sweep.ts). A margin of its own
 * here once swallowed the local stack's whole 10 s sweep, and no schedule
 * fired under `npm start` (issue #49).
 */
export async function fireDueSchedules(
  ctx: AppContext,
  now = new Date(),
  opts: { deadline?: number } = {},
): Promise<FireSummary> {
  const summary: FireSummary = { schedules_fired: 0, schedules_skipped: 0 };
  const due = await dueSchedules(ctx.pool, now, BATCH, MAX_JITTER_S);
  for (const schedule of due) {
    if (opts.deadline !== undefined && Date.now() >= opts.deadline) break;
    let outcome: Awaited<ReturnType<typeof fireOne>>;
    try {
      outcome = await fireOne(ctx, schedule, now);
    } catch (err) {
      // The database away is the sweep's to count and defer; anything else
      // is this schedule's alone: it says so and moves on, and the others
      // still fire.
      if (unavailability(err)) throw err;
      log('error', 'schedule: could not fire', {
        project_id: schedule.project_id,
        schedule: schedule.name,
        err,
      });
      await giveUpTick(ctx, schedule, now, err);
      continue;
    }
    if (outcome === 'fired') summary.schedules_fired++;
    else if (outcome === 'skipped') summary.schedules_skipped++;
  }
  return summary;
}

/** The tick a due schedule fires now, and the one after it. */
function ticksOf(s: DueSchedule, now: Date) {
  const from = s.next_run_at!;
  // The latest tick at or before now, found backward from now however long
  // the gap (lib/schedules/cron.ts). `from` is due, so it is at or before
  // now: the answer is never older than it.
  const latest = latestTick(s.cron, s.timezone, new Date(from.getTime() - 1), now);
  const tick = latest !== null && latest > from ? latest : from;
  const next = nextDue(
    { cron: s.cron, timezone: s.timezone, projectId: s.project_id, name: s.name },
    tick,
  );
  return { from, tick, next };
}

/** A failure no retry cures: last_error says why, and the schedule moves to its next tick. */
async function giveUpTick(ctx: AppContext, s: DueSchedule, now: Date, err: unknown) {
  const { from, tick, next } = ticksOf(s, now);
  const why = err instanceof Error ? err.message : String(err);
  const error = `schedule ${s.name}: the tick of ${tick.toISOString()} did not fire: ${why.split('\n')[0]}`;
  try {
    await transaction(ctx.pool, (tx) => skipTickWithError(tx, s.id, from, next, error));
  } catch (err2) {
    if (unavailability(err2)) throw err2;
    log('error', 'schedule: could not record why it did not fire', {
      project_id: s.project_id,
      schedule: s.name,
      err: err2,
    });
  }
}

async function fireOne(
  ctx: AppContext,
  s: DueSchedule,
  now: Date,
): Promise<'fired' | 'skipped' | 'lost' | 'deferred'> {
  const { from, tick, next } = ticksOf(s, now);
  const late = now.getTime() - tick.getTime();
  if (!s.project_enabled || (s.catch_up === 'none' && late > CATCH_UP_NONE_GRACE_MS)) {
    // Nothing fires; the schedule moves past what it missed.
    const moved = await transaction(ctx.pool, (tx) => advanceSchedule(tx, s.id, from, next));
    return moved ? 'skipped' : 'lost';
  }

  const project = await getProjectRow(ctx.pool, s.project_id);
  if (!project) return 'lost';
  let head: HeadResult;
  try {
    // A project served by the GitHub App reads it with its installation's token.
    const source = {
      ...branchSource(ctx.config, ctx.keyring, project),
      token: await projectToken(ctx, project),
    };
    head = await resolveHead(source, s.ref);
  } catch (err) {
    if (!(err instanceof ForgeUnavailableError)) throw err;
    // Deferred, keeping its tick: tried again after a backoff (as long as
    // the tick is late, within bounds, never past the next tick's due time),
    // and then fires the latest tick. Deferred schedules are taken last.
    const wait = Math.min(RETRY_MAX_MS, Math.max(RETRY_MIN_MS, late));
    let retryAt = new Date(now.getTime() + wait);
    if (next !== null && next.dueAt < retryAt) retryAt = next.dueAt;
    await transaction(ctx.pool, (tx) =>
      deferSchedule(
        tx,
        s.id,
        from,
        retryAt,
        `${err.message} (tried again at ${retryAt.toISOString()})`,
      ),
    );
    log('warn', 'schedule: the forge did not answer; tried again later', {
      project_id: s.project_id,
      schedule: s.name,
      err,
    });
    return 'deferred';
  }

  const reason = head.found ? null : `schedule ${s.name}: ${head.reason}`;
  const created = await transaction(
    ctx.pool,
    async (tx): Promise<JobRow | null> => {
      // The guard: whoever takes the tick's row makes the job. The schedule's
      // conditional move then settles a ticker that read an older tick.
      if (!(await claimTick(tx, s.id, tick))) return null;
      const { job } = await createJobTx(tx, {
        projectId: s.project_id,
        ref: head.found ? head.ref : s.ref ? fullRef(s.ref) : 'HEAD',
        sha: head.found ? head.sha : NO_COMMIT,
        trigger: 'schedule',
        trusted: true,
        trustReason: `schedule ${s.name}`,
        inputs: Object.keys(s.inputs).length > 0 ? s.inputs : null,
        scheduleName: s.name,
      });
      if (
        !(await advanceSchedule(tx, s.id, from, next, { at: now, jobId: job.id, error: reason }))
      ) {
        throw new TickLost();
      }
      await noteTickJob(tx, s.id, tick, job.id);
      if (reason !== null) {
        // Failed at once, saying why; no commit status (there is no commit).
        await tx.query('delete from status_outbox where job_id = $1', [job.id]);
        const failed = await tx.query<JobRow>(
          `update jobs set state = 'failed', error = $2, finished_at = now()
            where id = $1 returning *`,
          [job.id, reason],
        );
        return failed.rows[0]!;
      }
      return job;
    },
    // REPEATABLE READ with immediate retries, as every job creation: a
    // second ticker's insert of the same tick waits for the first's commit,
    // then finds the row (or fails with 40001 and retries to find it).
    { isolation: 'repeatable read', immediate: true, maxRetries: 64 },
  ).catch((err) => {
    if (err instanceof TickLost) return null;
    throw err;
  });
  if (created === null) return 'lost';
  if (created.state === 'pending') await triggerJob(ctx, created);
  return 'fired';
}

/** Another ticker moved the schedule first: this one's transaction rolls back. */
class TickLost extends Error {}

function fullRef(ref: string): string {
  return ref.startsWith('refs/') ? ref : `refs/heads/${ref}`;
}
