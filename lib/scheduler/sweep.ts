// The sweep repairs what a crash or a vanished runner left behind. It finds
// candidates with cheap indexed reads, then repairs each in its own short
// transaction that re-checks state and lease under a row lock: one long sweep
// transaction would be aborted by any heartbeat on a row it touched, and would
// hold locks runners are waiting for.
import { type Pool, transaction, unavailability } from '../db/index.ts';
import { formatDuration } from '../duration.ts';
import { log } from '../log.ts';
import type { TaskState } from '../states.ts';
import { endAttemptTx } from './attempt.ts';
import { timeOutBlock } from './block.ts';
import { stopTasksOfFinishedJobsTx } from './cancel.ts';
import { enqueueStatus } from './outbox.ts';
import { followUp, skipReachable } from './progress.ts';
import type { JobRow, TaskRow } from './types.ts';

export interface SweepOptions {
  /** Most rows each step repairs per sweep, so one sweep stays short. Default 200. */
  batch?: number;
  /** A pending job whose compile was dispatched longer ago than this is dispatched again. Default 120 s. */
  compileStaleS?: number;
  /** Dispatches of a compile before the job fails. Default 5. */
  maxCompileAttempts?: number;
  /**
   * How long a repair waits for a row someone else has locked before giving up
   * on it until the next sweep. Default 2 s: a row locked that long is busy.
   */
  lockTimeoutMs?: number;
  /**
   * When the sweep must stop taking new work (a `Date.now()` value): the
   * caller's deadline less a margin (the Lambda's remaining time, locally the
   * interval to the next sweep). Work left is counted in `deferred` and done
   * by the next sweep. Default: no deadline.
   */
  deadline?: number;
  /**
   * Aborted by the sweep when the database stops answering (a query or a
   * connect that timed out): every later call would wait out the same bound,
   * so nothing new starts, as past the deadline. The caller sees it and skips
   * its own steps; aborting it from outside stops the sweep the same way.
   */
  halt?: AbortController;
  /**
   * Starts the compile of a pending job the sweep found lost, right after the
   * transaction that marked it dispatched committed. The compile counts its
   * own attempt when it starts, so a sweep that dies between that commit and
   * this call burns nothing. Without it, lost compiles are only counted in
   * `compiles_redispatched` and left for a sweep that can dispatch.
   */
  dispatch?: (jobId: string) => Promise<void>;
  /**
   * Find, count and write nothing: each count is then the candidates the
   * sweep would repair (leases_expired, tasks_timed_out; jobs_settled counts
   * jobs with a ready child or nothing left; tasks_cancelled, finished jobs
   * with unfinished tasks; compiles_redispatched, lost compiles). For tests
   * and for an operator's look.
   */
  dryRun?: boolean;
}

export interface SweepSummary {
  leases_expired: number;
  tasks_requeued: number;
  tasks_failed: number;
  tasks_timed_out: number;
  /** Queued tasks no worker claimed within their queue_timeout, failed. */
  tasks_queue_timed_out: number;
  /** Blocked tasks nobody unblocked before their deadline, ended as their on_timeout says. */
  tasks_block_timed_out: number;
  tasks_promoted: number;
  tasks_skipped: number;
  /** Unfinished tasks found in a finished job (a backstop that should stay 0). */
  tasks_cancelled: number;
  jobs_settled: number;
  compiles_redispatched: number;
  compiles_failed: number;
  /** Repairs that failed; each is logged, and the sweep went on with the rest. */
  errors: number;
  /**
   * Candidates left for the next sweep: the deadline came first, or the
   * repair met a failure that passes (a lock or statement timeout, a lost or
   * silent connection, a conflict past its retries; logged at warn).
   */
  deferred: number;
  /**
   * Steps not run (the next sweep runs them): the deadline had passed, the
   * database went silent, or finding the step's candidates met a failure that
   * passes (counted in `deferred` too).
   */
  skipped: string[];
  /** Jobs whose compile this sweep dispatched again. */
  dispatch: string[];
}

type Repair = { state: TaskState; jobId: string; skipped: number } | null;

/**
 * How long past its timeout a running task is left to its runner, which is
 * stopping the script (SIGTERM, its kill grace, SIGKILL), reading its
 * services' logs, sending the rest of its log and reporting: failed by the
 * sweep sooner, the task would lose its log's tail and the runner wait out
 * refused uploads. A task whose lease has expired too (its runner stopped
 * reporting) is failed at once.
 */
export const TIMEOUT_GRACE_S = 60;

/** SQL: the current attempt `a` of task `t` is past its timeout, and past its grace unless its lease expired. */
const TIMED_OUT = `a.started_at + make_interval(secs => t.timeout_s) < now()
   and (a.started_at + make_interval(secs => t.timeout_s + ${TIMEOUT_GRACE_S}) < now()
        or t.lease_expires_at < now())`;

/** Ends the current attempt of a running task as lost or timed out, re-checked under its row lock. */
async function endAttempt(
  pool: Pool,
  taskId: string,
  leaseId: string,
  kind: 'lost' | 'timed_out',
  lockTimeoutMs: number,
): Promise<Repair> {
  return transaction(
    pool,
    async (tx) => {
      const { rows } = await tx.query<TaskRow & { expired: boolean; timed_out: boolean }>(
        `select t.*, t.lease_expires_at < now() as expired,
              (${TIMED_OUT}) as timed_out
         from tasks t join task_attempts a on a.task_id = t.id and a.attempt = t.attempt
        where t.id = $1
        for update of t`,
        [taskId],
      );
      const task = rows[0];
      // A heartbeat, a completion or another sweep got there first.
      if (!task || task.state !== 'running' || task.lease_id !== leaseId) return null;
      if (kind === 'lost' && !task.expired) return null;
      if (kind === 'timed_out' && !task.timed_out) return null;

      let state: TaskState;
      let error: string;
      if (task.cancel_requested) {
        state = 'cancelled';
        error = 'cancelled';
      } else if (kind === 'timed_out') {
        state = 'failed';
        error = `timed out after ${formatDuration(task.timeout_s)}`;
      } else {
        // An expired lease is a transient failure: the runner vanished.
        state = task.attempt < task.max_attempts ? 'queued' : 'failed';
        error =
          state === 'queued'
            ? 'lease expired: the runner stopped reporting; queued again'
            : `lease expired: the runner stopped reporting (attempt ${task.attempt} of ${task.max_attempts})`;
      }
      const skipped = await endAttemptTx(tx, task, {
        state,
        outcome: kind,
        transient: kind === 'lost',
        error,
      });
      return { state, jobId: task.job_id, skipped };
    },
    { lockTimeoutMs },
  );
}

/** Why a queued task failed for want of a worker: its labels, its pool and how long it waited. */
export function queueTimeoutMessage(task: {
  labels: string[];
  trusted: boolean;
  queue_timeout_s: number;
}): string {
  const labels = task.labels.length > 0 ? ` with labels [${task.labels.join(', ')}]` : '';
  const pool = task.trusted ? 'trusted' : 'untrusted';
  return `no worker${labels} (${pool} pool) claimed it within ${formatDuration(task.queue_timeout_s)}`;
}

/**
 * Fails a queued task that has waited longer than its queue_timeout, re-checked
 * under its row lock (a claim that took it meanwhile wins), and skips what
 * needs it unless it may fail.
 */
async function failUnclaimed(
  pool: Pool,
  taskId: string,
  lockTimeoutMs: number,
): Promise<{ jobId: string; skipped: number } | null> {
  return transaction(
    pool,
    async (tx) => {
      // At REPEATABLE READ a claim that committed after this snapshot makes
      // the lock raise 40001, and the retry finds the task running. The
      // find's rule (conductor_queue_waited_out) is asked again here: a task
      // the claim holds back for its group is not failed (issue #47).
      const { rows } = await tx.query<TaskRow & { waited_out: boolean; job_group: string | null }>(
        `select t.*, conductor_queue_waited_out(t) as waited_out,
                (select j.concurrency_key from jobs j
                  where j.id = t.job_id and not j.group_held) as job_group
           from tasks t
          where t.id = $1
          for update of t`,
        [taskId],
      );
      const task = rows[0];
      if (!task || task.state !== 'queued' || !task.waited_out) return null;
      // The snapshot may be older than a claim that has since taken a slot
      // in the task's group (or its job's), which can hold the task back
      // again without touching its row. So the group's row is written as a
      // claim that takes a slot writes it (migrations/017), taking none: if
      // such a claim committed after this snapshot, this raises 40001 and
      // the retry asks again; a claim after this one waits for it and raises
      // 40001 itself, and its retry finds the task failed.
      const groups = [
        ...(task.concurrency_key ? [`task:${task.concurrency_key}`] : []),
        ...(task.job_group ? [`job:${task.job_group}`] : []),
      ];
      if (groups.length > 0) {
        await tx.query(
          `insert into concurrency_groups as g (key, taken_at)
           select k, '-infinity' from unnest($1::text[]) k
           on conflict (key) do update set version = g.version`,
          [groups],
        );
      }
      await tx.query(
        `update tasks set state = 'failed', finished_at = now(), error = $2 where id = $1`,
        [task.id, queueTimeoutMessage(task)],
      );
      const skipped = task.allow_failure
        ? 0
        : await skipReachable(tx, [task.id], `skipped: ${task.name} failed`);
      return { jobId: task.job_id, skipped };
    },
    { lockTimeoutMs },
  );
}

/** Marks a lost compile for dispatch again, or fails the job once it has had its attempts. */
async function redispatch(
  pool: Pool,
  jobId: string,
  staleS: number,
  maxAttempts: number,
  lockTimeoutMs: number,
): Promise<'dispatch' | 'failed' | null> {
  return transaction(
    pool,
    async (tx) => {
      const { rows } = await tx.query<JobRow & { stale: boolean }>(
        `select *, (dispatched_at is null or dispatched_at < now() - make_interval(secs => $2)) as stale
         from jobs where id = $1 for update`,
        [jobId, staleS],
      );
      const job = rows[0];
      if (!job || job.state !== 'pending' || !job.stale) return null;
      if (job.compile_attempts >= maxAttempts) {
        const reason = job.error ? `: ${job.error}` : '';
        const error = `the pipeline could not be read after ${job.compile_attempts} attempts${reason}`;
        await tx.query(
          `update jobs set state = 'failed', finished_at = now(), error = $2 where id = $1`,
          [jobId, error],
        );
        await enqueueStatus(tx, jobId, 'error', error);
        return 'failed';
      }
      // Only the mark that keeps a concurrent sweep from dispatching it too:
      // the compile counts its attempt when it starts (countCompileAttempt),
      // so an attempt is never counted for a dispatch that did not happen.
      await tx.query(`update jobs set dispatched_at = now() where id = $1`, [jobId]);
      return 'dispatch';
    },
    { lockTimeoutMs },
  );
}

/**
 * One pass of repairs: expired leases, timed-out tasks, queued tasks no
 * worker claimed in time, ready waiting tasks,
 * running jobs with nothing left, and lost compiles. Safe to run concurrently
 * with itself and with traffic; answers what it did.
 */
export async function sweep(pool: Pool, opts: SweepOptions = {}): Promise<SweepSummary> {
  const batch = opts.batch ?? 200;
  const staleS = opts.compileStaleS ?? 120;
  const maxCompileAttempts = opts.maxCompileAttempts ?? 5;
  const lockTimeoutMs = opts.lockTimeoutMs ?? 2_000;
  const summary: SweepSummary = {
    leases_expired: 0,
    tasks_requeued: 0,
    tasks_failed: 0,
    tasks_timed_out: 0,
    tasks_queue_timed_out: 0,
    tasks_block_timed_out: 0,
    tasks_promoted: 0,
    tasks_skipped: 0,
    tasks_cancelled: 0,
    jobs_settled: 0,
    compiles_redispatched: 0,
    compiles_failed: 0,
    errors: 0,
    deferred: 0,
    skipped: [],
    dispatch: [],
  };
  const halt = opts.halt ?? new AbortController();
  const outOfTime = () =>
    halt.signal.aborted || (opts.deadline !== undefined && Date.now() >= opts.deadline);
  // A failure that passes is the next sweep's to retry, and a warning, not
  // an error: under load a held row lock is routine. A silent database ends
  // this sweep, since each further call would wait out its whole bound.
  const passing = (err: unknown): boolean => {
    const kind = unavailability(err);
    if (kind === 'silent') halt.abort(err);
    return kind !== undefined;
  };
  // One row that keeps failing (a statement timeout on a huge job, say) must
  // not stop the repairs after it, in this sweep or the next. Past the
  // deadline no new repair starts: each one left is counted, and the next
  // sweep finds it again (every candidate query starts from the state).
  const each = async <T>(rows: T[], what: string, repair: (row: T) => Promise<void>) => {
    for (const [i, row] of rows.entries()) {
      if (outOfTime()) {
        summary.deferred += rows.length - i;
        return;
      }
      try {
        await repair(row);
      } catch (err) {
        if (passing(err)) {
          summary.deferred++;
          log('warn', `sweep: ${what} deferred to the next sweep`, { row, err });
        } else {
          summary.errors++;
          log('error', `sweep: ${what} failed`, { row, err });
        }
      }
    }
  };
  const jobsToFollow = new Set<string>();

  // Timeouts first: a task past its timeout whose runner also vanished has
  // used its time, and fails rather than being queued again.
  const find = async <R extends Record<string, unknown>>(
    step: string,
    sql: string,
    values: unknown[],
  ): Promise<{ rows: R[] }> => {
    if (!outOfTime()) {
      try {
        return await pool.query<R>(sql, values);
      } catch (err) {
        if (!passing(err)) throw err;
        summary.deferred++;
        log('warn', `sweep: finding ${step} failed; the next sweep looks again`, { err });
      }
    }
    summary.skipped.push(step);
    return { rows: [] };
  };
  const timedOut = await find<{ id: string; lease_id: string }>(
    'timeouts',
    `select t.id, t.lease_id
       from tasks t join task_attempts a on a.task_id = t.id and a.attempt = t.attempt
      where t.state = 'running' and ${TIMED_OUT}
      limit $1`,
    [batch],
  );
  if (opts.dryRun) {
    summary.tasks_timed_out = timedOut.rows.length;
    timedOut.rows = [];
  }
  await each(timedOut.rows, 'timing out a task', async (row) => {
    const repair = await endAttempt(pool, row.id, row.lease_id, 'timed_out', lockTimeoutMs);
    if (!repair) return;
    summary.tasks_timed_out++;
    summary.tasks_skipped += repair.skipped;
    if (repair.state === 'failed') summary.tasks_failed++;
    jobsToFollow.add(repair.jobId);
  });

  const expired = await find<{ id: string; lease_id: string }>(
    'leases',
    `select id, lease_id from tasks
      where state = 'running' and lease_expires_at < now()
      order by lease_expires_at limit $1`,
    [batch],
  );
  if (opts.dryRun) {
    summary.leases_expired = expired.rows.length;
    expired.rows = [];
  }
  await each(expired.rows, 'expiring a lease', async (row) => {
    const repair = await endAttempt(pool, row.id, row.lease_id, 'lost', lockTimeoutMs);
    if (!repair) return;
    summary.leases_expired++;
    summary.tasks_skipped += repair.skipped;
    if (repair.state === 'queued') summary.tasks_requeued++;
    else if (repair.state === 'failed') summary.tasks_failed++;
    if (repair.state !== 'queued') jobsToFollow.add(repair.jobId);
  });

  // Queued tasks that no worker claimed in time: no worker has their labels
  // in their pool, or none is running. Walked oldest first on tasks_queued
  // (migrations/005), which carries queue_timeout_s, so tasks still within
  // their time cost an index entry each and no table row.
  const unclaimed = await find<{ id: string }>(
    'queue timeouts',
    // A task waiting for its concurrency group waits for the group, not for
    // a worker: its queue timeout does not run, and counts from when the
    // group let it be claimed (conductor_queue_waited_out: the claim's own
    // rule, and the group's last change, issue #47). That clock never starts
    // before queued_at, so the index still bounds the walk.
    `select t.id from tasks t
      where t.state = 'queued' and t.queued_at + make_interval(secs => t.queue_timeout_s) < now()
        and conductor_queue_waited_out(t)
      order by t.queued_at limit $1`,
    [batch],
  );
  if (opts.dryRun) {
    summary.tasks_queue_timed_out = unclaimed.rows.length;
    unclaimed.rows = [];
  }
  await each(unclaimed.rows, 'failing an unclaimed task', async (row) => {
    const repair = await failUnclaimed(pool, row.id, lockTimeoutMs);
    if (!repair) return;
    summary.tasks_queue_timed_out++;
    summary.tasks_failed++;
    summary.tasks_skipped += repair.skipped;
    jobsToFollow.add(repair.jobId);
  });

  // Block steps nobody unblocked in time (lib/scheduler/block.ts), on
  // tasks_block_deadline: blocks still within their time cost nothing.
  const blocks = await find<{ id: string }>(
    'block timeouts',
    `select id from tasks where state = 'blocked' and block_deadline < now()
      order by block_deadline limit $1`,
    [batch],
  );
  if (opts.dryRun) {
    summary.tasks_block_timed_out = blocks.rows.length;
    blocks.rows = [];
  }
  await each(blocks.rows, 'ending a block past its deadline', async (row) => {
    const ended = await timeOutBlock(pool, row.id, lockTimeoutMs);
    if (!ended) return;
    summary.tasks_block_timed_out++;
    if (ended.failed) summary.tasks_failed++;
    summary.tasks_skipped += ended.skipped + (ended.failed ? 0 : 1);
    jobsToFollow.add(ended.jobId);
  });

  // Ready waiting tasks and running jobs with nothing left: a follow-up that
  // never ran (a crash between the outcome's commit and the follow-up).
  const stalled = await find<{ job_id: string }>(
    'follow-ups',
    `(select distinct w.job_id
        from tasks w
       where w.state = 'waiting'
         and not exists (
               select 1 from task_needs n join tasks p on p.id = n.need_id
                where n.task_id = w.id and p.state in ('waiting', 'queued', 'running', 'blocked'))
       limit $1)
     union
     (select j.id
        from jobs j
       where j.state = 'running'
         and not exists (
               select 1 from tasks t
                where t.job_id = j.id and t.state in ('waiting', 'queued', 'running', 'blocked'))
       limit $1)`,
    [batch],
  );
  for (const row of stalled.rows) jobsToFollow.add(row.job_id);

  if (opts.dryRun) {
    summary.jobs_settled = jobsToFollow.size;
    jobsToFollow.clear();
  }
  await each([...jobsToFollow], 'following up a job', async (jobId) => {
    const follow = await followUp(pool, jobId);
    summary.tasks_promoted += follow.promoted;
    summary.tasks_failed += follow.failed;
    summary.tasks_skipped += follow.skipped;
    if (follow.jobState) summary.jobs_settled++;
  });

  // A backstop: unfinished tasks of a finished job can never run, and a
  // running one must be told to stop. Cancel and settle are written so this
  // does not happen; if it ever does, the task would sit in the claim index.
  const orphans = await find<{ job_id: string }>(
    'orphans',
    `select distinct t.job_id
       from tasks t join jobs j on j.id = t.job_id
      where t.state in ('waiting', 'queued', 'running', 'blocked')
        and j.state in ('success', 'failed', 'cancelled')
        and not (t.state = 'running' and t.cancel_requested)
      limit $1`,
    [batch],
  );
  if (opts.dryRun) {
    summary.tasks_cancelled = orphans.rows.length;
    orphans.rows = [];
  }
  await each(orphans.rows, 'stopping the tasks of a finished job', async (row) => {
    summary.tasks_cancelled += await transaction(
      pool,
      (tx) =>
        stopTasksOfFinishedJobsTx(tx, [row.job_id], 'cancelled: its job had already finished'),
      { isolation: 'read committed', lockTimeoutMs },
    );
  });

  const pending = await find<{ id: string }>(
    'compiles',
    `select id from jobs
      where state = 'pending'
        and (dispatched_at is null or dispatched_at < now() - make_interval(secs => $1))
      order by dispatched_at nulls first
      limit $2`,
    [staleS, batch],
  );
  if (opts.dryRun) {
    summary.compiles_redispatched = pending.rows.length;
    pending.rows = [];
  }
  await each(pending.rows, 'dispatching a compile again', async (row) => {
    const result = await redispatch(pool, row.id, staleS, maxCompileAttempts, lockTimeoutMs);
    if (result === 'dispatch') {
      summary.compiles_redispatched++;
      summary.dispatch.push(row.id);
      // Right after its own commit, not after the whole sweep: a sweep that
      // stops (its deadline, a crash) leaves no marked job undispatched but
      // this one, and that one is dispatched again once it is stale.
      await opts.dispatch?.(row.id);
    } else if (result === 'failed') {
      summary.compiles_failed++;
    }
  });
  return summary;
}
