// Schedules as rows (migrations/012): create, list, change, delete, the due
// ones, and the conditional moves of a schedule to its next tick. The firing
// itself (the forge asked for the ref's head, the job made) is
// lib/app/schedules.ts.
import type { Queryable } from '../db/index.ts';
import type { ScheduleCatchUp } from '../states.ts';

/** A schedule as stored; field names are the API's. */
export interface ScheduleRow {
  id: string;
  project_id: string;
  name: string;
  cron: string;
  timezone: string;
  ref: string | null;
  inputs: Record<string, string | number | boolean>;
  enabled: boolean;
  catch_up: ScheduleCatchUp;
  next_run_at: Date | null;
  due_at: Date | null;
  last_run_at: Date | null;
  last_job_id: string | null;
  last_error: string | null;
  created_at: Date;
  updated_at: Date;
}

export interface NewSchedule {
  projectId: string;
  name: string;
  cron: string;
  timezone: string;
  ref: string | null;
  inputs: Record<string, string | number | boolean>;
  enabled: boolean;
  catchUp: ScheduleCatchUp;
  nextRunAt: Date | null;
  dueAt: Date | null;
}

/** Inserts a schedule; a name the project already has raises 23505. */
export async function insertSchedule(db: Queryable, s: NewSchedule): Promise<ScheduleRow> {
  const { rows } = await db.query<ScheduleRow>(
    `insert into schedules (project_id, name, cron, timezone, ref, inputs, enabled, catch_up,
                            next_run_at, due_at)
     values ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9, $10)
     returning *`,
    [
      s.projectId,
      s.name,
      s.cron,
      s.timezone,
      s.ref,
      JSON.stringify(s.inputs),
      s.enabled,
      s.catchUp,
      s.nextRunAt,
      s.dueAt,
    ],
  );
  return rows[0]!;
}

/** The project's schedules by name. */
export async function listSchedules(db: Queryable, projectId: string): Promise<ScheduleRow[]> {
  const { rows } = await db.query<ScheduleRow>(
    'select * from schedules where project_id = $1 order by name',
    [projectId],
  );
  return rows;
}

/** One schedule of the project, or undefined; `lock` takes its row for the change. */
export async function getSchedule(
  db: Queryable,
  projectId: string,
  name: string,
  lock = false,
): Promise<ScheduleRow | undefined> {
  const { rows } = await db.query<ScheduleRow>(
    `select * from schedules where project_id = $1 and name = $2${lock ? ' for no key update' : ''}`,
    [projectId, name],
  );
  return rows[0];
}

/** Writes a schedule's settings and its next tick; answers the row. */
export async function updateSchedule(db: Queryable, s: NewSchedule): Promise<ScheduleRow> {
  const { rows } = await db.query<ScheduleRow>(
    `update schedules
        set cron = $3, timezone = $4, ref = $5, inputs = $6::jsonb, enabled = $7, catch_up = $8,
            next_run_at = $9, due_at = $10, updated_at = now()
      where project_id = $1 and name = $2
      returning *`,
    [
      s.projectId,
      s.name,
      s.cron,
      s.timezone,
      s.ref,
      JSON.stringify(s.inputs),
      s.enabled,
      s.catchUp,
      s.nextRunAt,
      s.dueAt,
    ],
  );
  return rows[0]!;
}

/** Deletes a schedule; answers whether it existed. */
export async function deleteSchedule(
  db: Queryable,
  projectId: string,
  name: string,
): Promise<boolean> {
  const { rowCount } = await db.query('delete from schedules where project_id = $1 and name = $2', [
    projectId,
    name,
  ]);
  return (rowCount ?? 0) > 0;
}

/** A due schedule, with what firing it needs to know of its project. */
export interface DueSchedule extends ScheduleRow {
  project_enabled: boolean;
}

/**
 * Enabled schedules whose due time has come by `now` (schedules_due): those
 * due at their tick first, oldest first, then those deferred after a failed
 * attempt (a due time later than the tick plus the most jitter), so a batch
 * of schedules that keep failing cannot keep the others from firing.
 */
export async function dueSchedules(
  db: Queryable,
  now: Date,
  limit: number,
  maxJitterS: number,
): Promise<DueSchedule[]> {
  const { rows } = await db.query<DueSchedule>(
    `select s.*, p.enabled as project_enabled
       from schedules s join projects p on p.id = s.project_id
      where s.enabled and s.due_at <= $1
      order by s.due_at >= s.next_run_at + make_interval(secs => $3), s.due_at
      limit $2`,
    [now, limit, maxJitterS],
  );
  return rows;
}

/**
 * A schedule that could not fire its tick yet (the forge did not answer):
 * it keeps its tick (next_run_at) and is due again at `retryAt`, saying why
 * in last_error. Conditional on the tick it was read at, as advanceSchedule.
 */
export async function deferSchedule(
  tx: Queryable,
  id: string,
  from: Date,
  retryAt: Date,
  error: string,
): Promise<boolean> {
  const { rowCount } = await tx.query(
    `update schedules set due_at = $3, last_error = $4 where id = $1 and next_run_at = $2`,
    [id, from, retryAt, error],
  );
  return rowCount === 1;
}

/**
 * A schedule whose tick could not fire for a reason a retry would not cure:
 * it moves to its next tick without a job, last_error saying why.
 * Conditional on the tick it was read at, as advanceSchedule.
 */
export async function skipTickWithError(
  tx: Queryable,
  id: string,
  from: Date,
  next: { tick: Date; dueAt: Date } | null,
  error: string,
): Promise<boolean> {
  const { rowCount } = await tx.query(
    `update schedules set next_run_at = $3, due_at = $4, last_error = $5
      where id = $1 and next_run_at = $2`,
    [id, from, next?.tick ?? null, next?.dueAt ?? null, error],
  );
  return rowCount === 1;
}

/**
 * Moves a schedule from the tick it was read at (`from`) to the next, inside
 * the caller's transaction: conditional on next_run_at still being `from`,
 * so of two tickers that read the same tick only one moves it; the other
 * (at REPEATABLE READ, a 40001 and a retry that finds it moved) does nothing.
 * Answers whether this one moved it.
 */
export async function advanceSchedule(
  tx: Queryable,
  id: string,
  from: Date,
  next: { tick: Date; dueAt: Date } | null,
  fired?: { at: Date; jobId: string; error: string | null },
): Promise<boolean> {
  const { rowCount } = await tx.query(
    `update schedules
        set next_run_at = $3, due_at = $4,
            last_run_at = case when $5::timestamptz is null then last_run_at else $5 end,
            last_job_id = case when $5::timestamptz is null then last_job_id else $6::uuid end,
            last_error = case when $5::timestamptz is null then last_error else $7 end
      where id = $1 and next_run_at = $2`,
    [
      id,
      from,
      next?.tick ?? null,
      next?.dueAt ?? null,
      fired?.at ?? null,
      fired?.jobId ?? null,
      fired?.error ?? null,
    ],
  );
  return rowCount === 1;
}

/**
 * Takes the (schedule, tick) row: the one guard every firing passes, whoever
 * fires it. Answers false when the tick was fired already.
 */
export async function claimTick(tx: Queryable, scheduleId: string, tick: Date): Promise<boolean> {
  const { rowCount } = await tx.query(
    `insert into schedule_ticks (schedule_id, tick) values ($1, $2) on conflict do nothing`,
    [scheduleId, tick],
  );
  return rowCount === 1;
}

/** Records the job a tick made. */
export async function noteTickJob(
  tx: Queryable,
  scheduleId: string,
  tick: Date,
  jobId: string,
): Promise<void> {
  await tx.query('update schedule_ticks set job_id = $3 where schedule_id = $1 and tick = $2', [
    scheduleId,
    tick,
    jobId,
  ]);
}

/**
 * A scheduled job whose pipeline failed to compile: its schedule's
 * last_error says why (the job's own error, first line), when it is still
 * the schedule's last job.
 */
export async function noteScheduledJobFailed(db: Queryable, jobId: string): Promise<void> {
  await db.query(
    `update schedules s
        set last_error = format('job #%s failed: %s', j.number, split_part(j.error, E'\\n', 1))
       from jobs j
      where s.last_job_id = $1 and j.id = $1 and j.state = 'failed' and j.error is not null`,
    [jobId],
  );
}

/**
 * For the idle gate: whether a schedule of an enabled project is due now,
 * and when the next one will be.
 */
export async function scheduleWork(db: Queryable): Promise<{ work: boolean; wakeAt: Date | null }> {
  const { rows } = await db.query<{ work: boolean; wake_at: Date | null }>(
    `select exists (select 1 from schedules s join projects p on p.id = s.project_id
                     where s.enabled and p.enabled and s.due_at <= now()) as work,
            (select min(s.due_at) from schedules s join projects p on p.id = s.project_id
              where s.enabled and p.enabled) as wake_at`,
  );
  return { work: rows[0]!.work, wakeAt: rows[0]!.wake_at };
}
