// How a job moves forward once a task has finished: skipping what can no longer
// run, promoting what became ready, settling the job. Promotion and settle run
// in a transaction opened AFTER the outcome committed (see followUp): under
// REPEATABLE READ a snapshot taken before a sibling's commit still sees that
// sibling running, so deciding inside the completing transaction strands
// children and jobs when two tasks finish at once.
import { type Pool, prepared, type Queryable, statement, transaction } from '../db/index.ts';
import { log } from '../log.ts';
import { describeBytes } from '../pipeline/limits.ts';
import type { JobState, TaskRunWhen } from '../states.ts';
import { enqueueStatus, WAITING_FOR_APPROVAL } from './outbox.ts';
import { MAX_INHERITED_OUTPUT_BYTES } from './outputs.ts';

/**
 * Skips every waiting or queued task reachable from `fromIds`; returns how
 * many. The walk stops at a task whose `when:` is always or on_failure: it
 * runs (or is skipped) once its needs are final, and its own outcome decides
 * for what follows it.
 */
export async function skipReachable(
  tx: Queryable,
  fromIds: string[],
  because: string,
): Promise<number> {
  if (fromIds.length === 0) return 0;
  const { rowCount } = await tx.query(
    `with recursive reach (id) as (
       select n.task_id from task_needs n join tasks c on c.id = n.task_id
        where n.need_id = any($1::uuid[]) and c.run_when = 'on_success'
       union
       select n.task_id from task_needs n join reach r on n.need_id = r.id
         join tasks c on c.id = n.task_id
        where c.run_when = 'on_success'
     )
     update tasks t
        set state = 'skipped', finished_at = now(), error = $2
       from reach r
      where t.id = r.id and t.state in ('waiting', 'queued')`,
    [fromIds, because],
  );
  return rowCount ?? 0;
}

/**
 * Records "waiting for approval: <prompt>" for a job with a blocked task (the
 * first by position), in the caller's transaction; nothing otherwise.
 */
export async function noteBlockedTx(tx: Queryable, jobId: string): Promise<void> {
  const { rows } = await tx.query<{ prompt: string }>(
    `select t.block ->> 'prompt' as prompt from tasks t
      where t.job_id = $1 and t.state = 'blocked' order by t.position limit 1`,
    [jobId],
  );
  if (rows[0]) {
    await enqueueStatus(tx, jobId, 'pending', `${WAITING_FOR_APPROVAL}: ${rows[0].prompt}`);
  }
}

export interface PromoteResult {
  promoted: number;
  failed: number;
  skipped: number;
}

/**
 * Promotes the waiting tasks of a running job whose needs have all finished.
 * With `parentId`, only that task's children are considered (the completion
 * path); without, every waiting task of the job (the sweep). A child whose
 * producer declared an output it did not give fails instead, naming both; so
 * does a child whose producers' outputs weigh more than a claim may carry
 * (MAX_INHERITED_OUTPUT_BYTES), naming the producers; a child of a task that
 * did not succeed (and was not allowed to fail) is skipped.
 */
export async function promoteReady(
  tx: Queryable,
  jobId: string,
  parentId?: string,
): Promise<PromoteResult> {
  // From a finished parent, start at its edges (task_needs_need) rather than
  // at the job's unfinished tasks, so the cost follows the parent's children,
  // not the size of the job. A need's state is a scalar subquery, one
  // primary-key probe per edge: as a join, statistics taken while nothing was
  // unfinished led the planner to scan every unfinished task once per
  // candidate (a fan-out of 998 children took 0.44 s to promote).
  const candidates =
    parentId === undefined
      ? `tasks w where w.job_id = $1 and w.state = 'waiting'`
      : `task_needs e join tasks w on w.id = e.task_id
          where e.need_id = $2::uuid and w.job_id = $1 and w.state = 'waiting'`;
  const { rows } = await tx.query<{
    id: string;
    name: string;
    blocked_by: string | null;
    missing: string | null;
    inherits: boolean;
    run_when: TaskRunWhen;
    failed_upstream: boolean | null;
  }>(
    // `when: on_failure` asks whether anything it needs, directly or through
    // other tasks, failed (allow_failure excepted): a test skipped because
    // the build failed still counts the build.
    `select w.id, w.name, w.run_when,
            case when w.run_when = 'on_failure' then exists (
              with recursive up (id) as (
                select n.need_id from task_needs n where n.task_id = w.id
                union
                select n.need_id from task_needs n join up u on n.task_id = u.id
              )
              select 1 from up join tasks p on p.id = up.id
               where p.state = 'failed' and not p.allow_failure) end as failed_upstream,
            (select string_agg(p.name, ', ' order by p.position)
               from task_needs n join tasks p on p.id = n.need_id
              where n.task_id = w.id
                and (p.state in ('skipped', 'cancelled') or (p.state = 'failed' and not p.allow_failure))
            ) as blocked_by,
            (select string_agg(format('output "%s" of "%s"', o.name, p.name), ', ' order by p.position, o.name)
               from task_needs n join tasks p on p.id = n.need_id
               cross join lateral unnest(p.outputs) as o (name)
              where n.task_id = w.id
                and not exists (select 1 from task_outputs x where x.task_id = p.id and x.name = o.name)
            ) as missing,
            exists (select 1 from task_needs n join task_outputs o on o.task_id = n.need_id
                     where n.task_id = w.id) as inherits
       from ${candidates}
        and exists (select 1 from jobs j where j.id = $1 and j.state = 'running')
        and not exists (
              select 1 from task_needs n
               where n.task_id = w.id
                 and (select p.state from tasks p where p.id = n.need_id)
                     in ('waiting', 'queued', 'running', 'blocked'))
      order by w.position`,
    parentId === undefined ? [jobId] : [jobId, parentId],
  );
  const result: PromoteResult = { promoted: 0, failed: 0, skipped: 0 };
  if (rows.length === 0) return result;
  // Lock the job before writing any task, the order a cancel takes (job, then
  // tasks): otherwise a follow-up holding a child it fails and waiting for the
  // job to settle it deadlocks with a cancel holding the job and waiting for
  // that child.
  await tx.query('select 1 from jobs where id = $1 for no key update', [jobId]);
  const ready: string[] = [];
  const inheriting: string[] = [];
  for (const row of rows) {
    // `when:`: always runs whatever its needs ended as; on_failure only after
    // a failure upstream; on_success (the default) only after their success.
    const skip =
      row.run_when === 'always'
        ? null
        : row.run_when === 'on_failure'
          ? row.failed_upstream
            ? null
            : 'skipped: nothing it needs failed (when: on_failure)'
          : row.blocked_by !== null
            ? `skipped: ${row.blocked_by} did not succeed`
            : null;
    if (skip !== null) {
      // Normally skipped already by the failure itself; this catches the rest.
      const { rowCount } = await tx.query(
        `update tasks set state = 'skipped', finished_at = now(), error = $2
          where id = $1 and state = 'waiting'`,
        [row.id, skip],
      );
      result.skipped += rowCount ?? 0;
      result.skipped += await skipReachable(tx, [row.id], `skipped: ${row.name} did not run`);
    } else if (row.missing !== null && row.run_when === 'on_success') {
      const { rowCount } = await tx.query(
        `update tasks set state = 'failed', finished_at = now(), error = $2
          where id = $1 and state = 'waiting'`,
        [row.id, `needs ${row.missing}, which finished without it`],
      );
      result.failed += rowCount ?? 0;
      result.skipped += await skipReachable(tx, [row.id], `skipped: ${row.name} failed`);
    } else if (row.inherits) {
      inheriting.push(row.id);
    } else {
      ready.push(row.id);
    }
  }
  for (const heavy of await overweight(tx, inheriting)) {
    const { rowCount } = await tx.query(
      `update tasks set state = 'failed', finished_at = now(), error = $2
        where id = $1 and state = 'waiting'`,
      [heavy.id, heavy.error],
    );
    result.failed += rowCount ?? 0;
    result.skipped += await skipReachable(tx, [heavy.id], `skipped: ${heavy.name} failed`);
    inheriting.splice(inheriting.indexOf(heavy.id), 1);
  }
  ready.push(...inheriting);
  if (ready.length > 0) {
    // Conditional on 'waiting': when two follow-ups race to promote the same
    // child, the loser's UPDATE hits the winner's commit (40001), retries, and
    // finds nothing left to promote.
    // A block step goes to `blocked` instead, holding no runner until it is
    // unblocked or its deadline passes (migrations/013).
    const { rows: moved } = await tx.query<{ state: string }>(
      `update tasks
          set state = case when block is null then 'queued' else 'blocked' end,
              queued_at = case when block is null then now() end,
              blocked_at = case when block is null then null else now() end,
              block_deadline = case when block is null then null
                                    else now() + make_interval(secs => (block ->> 'timeoutS')::int) end
        where id = any($1::uuid[]) and state = 'waiting'
        returning state`,
      [ready],
    );
    result.promoted += moved.length;
    if (moved.some((row) => row.state === 'blocked')) await noteBlockedTx(tx, jobId);
  }
  return result;
}

/**
 * Of the ready tasks `ids`, those whose needs' outputs weigh more than
 * MAX_INHERITED_OUTPUT_BYTES as a claim answers them ({"task": {"name":
 * "value"}}, each string JSON-escaped, as outputBytes counts them), with the
 * error naming each producer and its weight. Only tasks that inherit outputs
 * come here: reading the values' escaped lengths reads the values.
 */
async function overweight(
  tx: Queryable,
  ids: string[],
): Promise<Array<{ id: string; name: string; error: string }>> {
  if (ids.length === 0) return [];
  const { rows } = await tx.query<{
    id: string;
    name: string;
    producers: Array<{ name: string; bytes: number }>;
  }>(
    `select w.id, w.name,
            (select json_agg(json_build_object('name', p.name, 'bytes', s.bytes) order by p.position)
               from task_needs n join tasks p on p.id = n.need_id
               cross join lateral (
                 select sum(octet_length(to_jsonb(o.name)::text)
                            + octet_length(to_jsonb(o.value)::text) + 2) as bytes
                   from task_outputs o where o.task_id = p.id) s
              where n.task_id = w.id and s.bytes is not null) as producers
       from tasks w
      where w.id = any($1::uuid[])`,
    [ids],
  );
  const heavy: Array<{ id: string; name: string; error: string }> = [];
  for (const row of rows) {
    // Each producer is a key too, with its braces, colon and comma.
    const weights = (row.producers ?? []).map((p) => ({
      name: p.name,
      bytes: Number(p.bytes) + Buffer.byteLength(JSON.stringify(p.name)) + 4,
    }));
    const total = weights.reduce((sum, p) => sum + p.bytes, 0);
    if (total <= MAX_INHERITED_OUTPUT_BYTES) continue;
    const named = weights.map((p) => `"${p.name}" (${p.bytes} bytes)`).join(', ');
    heavy.push({
      id: row.id,
      name: row.name,
      error: `needs ${total} bytes of outputs from ${named}; at most ${describeBytes(MAX_INHERITED_OUTPUT_BYTES)} of inherited outputs per task are allowed`,
    });
  }
  return heavy;
}

/**
 * fail_fast: cancels the siblings (the other expansions of the same matrix
 * task) of each failed fail_fast expansion of a running job, or of `failedId`
 * alone: waiting and queued ones are cancelled, running ones get their cancel
 * flag, as a job cancel does. Run in the follow-up after the failure
 * committed, at READ COMMITTED: of two expansions failing at once, the second
 * follow-up waits for the first's job lock, then finds nothing left to stop,
 * so each sibling is stopped once. Answers how many it stopped.
 */
export async function stopSiblings(
  tx: Queryable,
  jobId: string,
  failedId?: string,
): Promise<number> {
  // The job first, as a cancel and promoteReady take it: a running sibling's
  // completion holds its task and never waits for the job, so this order
  // cannot deadlock with it.
  const job = await tx.query(
    `select 1 from jobs where id = $1 and state = 'running' for no key update`,
    [jobId],
  );
  if (job.rowCount === 0) return 0;
  const { rows } = await tx.query<{ id: string; name: string; state: string }>(
    `with failed as (
       select f.id, f.base_name, f.name from tasks f
        where f.job_id = $1 and f.fail_fast and f.state = 'failed' and not f.allow_failure
          and ($2::uuid is null or f.id = $2::uuid)
     )
     update tasks s
        set state = case when s.state = 'running' then s.state else 'cancelled' end,
            cancel_requested = s.cancel_requested or s.state = 'running',
            finished_at = case when s.state = 'running' then s.finished_at else now() end,
            queued_at = case when s.state = 'running' then s.queued_at end,
            -- A running sibling's error is the one its runner reports.
            error = case when s.state = 'running' then s.error
                         else format('cancelled: %s failed (fail_fast)', f.name) end
       from failed f
      where s.job_id = $1 and s.base_name = f.base_name and s.id <> f.id
        and s.state in ('waiting', 'queued', 'running', 'blocked')
        and not (s.state = 'running' and s.cancel_requested)
      returning s.id, s.name, s.state`,
    [jobId, failedId ?? null],
  );
  // As a cancel does: what needs a cancelled task is skipped (mostly skipped
  // already, since it needs the failed expansion too).
  for (const row of rows) {
    if (row.state === 'cancelled') {
      await skipReachable(tx, [row.id], `skipped: ${row.name} was cancelled`);
    }
  }
  return rows.length;
}

export interface FollowUpResult extends PromoteResult {
  /** The job's new state when this follow-up settled it, else null. */
  jobState: JobState | null;
  /** Siblings of a failed fail_fast expansion this follow-up cancelled or flagged. */
  stopped?: number;
}

/**
 * What runs after a task outcome commits: stop the siblings of a failed
 * fail_fast expansion, promote the children that became ready (failing or
 * skipping those that cannot run), commit that, and then, when nothing was
 * promoted, settle the job in a statement of its own.
 */
export async function followUp(
  pool: Pool,
  jobId: string,
  parentId?: string,
): Promise<FollowUpResult> {
  const promoted = await transaction(
    pool,
    async (tx) => {
      const stopped = await stopSiblings(tx, jobId, parentId);
      return { ...(await promoteReady(tx, jobId, parentId)), stopped };
    },
    // READ COMMITTED: each statement reads the newest commits, and a
    // conditional write that waited for a racing follow-up (the same child
    // to promote) re-checks its row and matches nothing instead of failing
    // with 40001 and starting over after a back-off.
    // Keyed plans: without statistics the planner scanned every task once per
    // candidate child (a fan-out of 1,000 took 0.9 s to promote).
    { isolation: 'read committed', keyedPlans: true, maxRetries: 20 },
  );
  // A job with a task just queued has work left. Otherwise settle, but only
  // now: the promotion may have failed or skipped tasks, and a settle inside
  // that transaction would check "nothing left" before those writes are
  // visible to anyone. A sibling that finished meanwhile would then see this
  // child still waiting and not settle either, and the job would be stranded
  // until the sweep. Opened after the commit, this settle sees the failures
  // and skips, and every sibling's outcome that committed before it.
  const jobState = promoted.promoted > 0 ? null : await settleJobAfterCommit(pool, jobId);
  return { ...promoted, jobState };
}

/**
 * Settles a running job with nothing left to do (failed if a task failed or
 * was cancelled without allow_failure, else success), in a statement of its
 * own: call it after the writes that finished the job's tasks committed.
 * Conditional on 'running', so of two racing settles exactly one moves the
 * row and reports the new state; the other finds the first's advisory lock on
 * the job and answers null without waiting (issue #36). conductor_settle
 * (migrations/functions/conductor_settle.sql) also records the commit status
 * to post, in the same commit.
 */
export async function settleJobAfterCommit(pool: Pool, jobId: string): Promise<JobState | null> {
  const [row] = await statement<{ state: JobState | null }>(
    pool,
    prepared('conductor_settle', 'select conductor_settle($1) as state', [jobId]),
  );
  return row?.state ?? null;
}

// The follow-up of a finished task, as one statement in its own transaction
// (conductor_follow_up, migrations/functions/conductor_follow_up.sql): it
// settles the job if nothing is left, and answers whether the job needs the
// promotion transaction. Run after the outcome committed, it sees that
// commit; a sibling that commits later runs its own and sees this one.
const FOLLOW_UP = 'select * from conductor_follow_up($1::uuid, $2::uuid)';

/** What conductor_follow_up answered for a finished task. */
export interface FollowUpRow {
  /** The job's final state when this follow-up settled it, else null. */
  job_state: JobState | null;
  /** A child of the task is waiting with every need finished. */
  promote: boolean;
  /** A failed fail_fast expansion has siblings to stop. */
  fail_fast: boolean;
  /** A `when: always` or `on_failure` task of the job may be ready. */
  conditional: boolean;
}

const NOTHING: FollowUpResult = { promoted: 0, failed: 0, skipped: 0, jobState: null };

/**
 * The follow-up after an outcome that has already committed (of `parentId`,
 * when a task finished; without, a job that just started): a failure here
 * must not turn that outcome into an error for the caller, so it is logged and
 * left to the sweep, which repairs lost promotions and settles.
 */
export async function followUpAfterCommit(
  pool: Pool,
  jobId: string,
  parentId?: string,
  /** conductor_follow_up's answer when the caller already ran it (conductor_finish_success). */
  done?: FollowUpRow,
): Promise<FollowUpResult | null> {
  try {
    if (parentId !== undefined) {
      const [row] = done
        ? [done]
        : await statement<FollowUpRow>(
            pool,
            prepared('conductor_follow_up', FOLLOW_UP, [jobId, parentId]),
          );
      if (row?.conditional) return await followUp(pool, jobId);
      if (!row?.promote && !row?.fail_fast) {
        return { ...NOTHING, jobState: row?.job_state ?? null };
      }
    }
    return await followUp(pool, jobId, parentId);
  } catch (err) {
    log('warn', 'follow-up failed; the sweep will finish it', { job_id: jobId, err });
    return null;
  }
}
