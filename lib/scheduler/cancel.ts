import { type Pool, type Queryable, transaction } from '../db/index.ts';
import { NotFoundError } from '../errors.ts';
import { UNFINISHED_JOB_STATES } from '../states.ts';
import { enqueueStatus } from './outbox.ts';
import type { JobRow } from './types.ts';

/**
 * Cancels unfinished jobs inside the caller's transaction: each becomes
 * 'cancelled' (a blocked one is declined: it never ran), its waiting and
 * queued tasks are cancelled, and every running task gets its cancel flag. Writing the running rows matters: a completion
 * that read one before this commits then conflicts and retries, and records
 * 'cancelled' instead of reviving the job. Returns the ids it cancelled.
 *
 * Run it at READ COMMITTED. Each UPDATE waits for rows a completion, claim or
 * follow-up holds and then re-checks them against what that one committed, so
 * nothing is missed; under a snapshot the same wait ends in 40001, and a job
 * whose tasks keep completing starves its cancel (measured: 7 of 8 cancels
 * against a stream of completions ran out of retries).
 */
export async function cancelJobsTx(
  tx: Queryable,
  jobIds: string[],
  reason: string,
  opts: {
    /**
     * Post no status for cancelled jobs of this commit and trust (a newer job
     * reports under the same context instead). A job of the other trust posts
     * under the other context, which nothing else would finish.
     */
    quietFor?: { sha: string; trusted: boolean };
  } = {},
): Promise<string[]> {
  if (jobIds.length === 0) return [];
  // The job first: a compile starting the job holds its row while inserting
  // the tasks, so once this lock is granted every task of the job is visible.
  // The state is read under the lock, so a job approved meanwhile is
  // cancelled as the pending job it now is, not declined as the blocked one
  // it was.
  const { rows } = await tx.query<{ id: string; state: string; sha: string; trusted: boolean }>(
    `select id, state, sha, trusted from jobs where id = any($1::uuid[]) and state = any($2::text[])
      order by id for update`,
    [jobIds, UNFINISHED_JOB_STATES],
  );
  if (rows.length === 0) return [];
  const declined = new Set(rows.filter((r) => r.state === 'blocked').map((r) => r.id));
  const cancelled = rows.map((r) => r.id);
  await tx.query(
    `update jobs
        set state = 'cancelled', finished_at = now(),
            error = coalesce(error, case when id = any($3::uuid[]) then $4 else $2 end)
      where id = any($1::uuid[])`,
    [cancelled, reason, [...declined], `declined: ${reason}`],
  );
  for (const { id, sha, trusted } of rows) {
    if (sha === opts.quietFor?.sha && trusted === opts.quietFor.trusted) continue;
    const what = declined.has(id) ? 'declined' : 'cancelled';
    await enqueueStatus(tx, id, 'error', `${what}: ${reason}`);
  }
  // Then the running tasks, before any task below them: a completion or a
  // lease expiry locks its task and then the tasks it skips, so taking the
  // running rows first keeps the lock order the same and avoids a deadlock.
  await tx.query(
    `select id from tasks where job_id = any($1::uuid[]) and state = 'running'
      order by id for no key update`,
    [cancelled],
  );
  await stopTasksOfFinishedJobsTx(tx, cancelled, null);
  return cancelled;
}

/**
 * Stops the unfinished tasks of finished jobs: waiting and queued ones are
 * cancelled, running ones get their cancel flag. One statement over all three
 * states: a task that moves between them meanwhile (a transient failure puts
 * a running task back in the queue; a claim takes a queued one) is re-checked
 * in the state it has when its lock is granted, where two statements, one per
 * state, could each miss it. `error` is set on tasks that have none. Used by a
 * cancel (its jobs are finished by then) and by the sweep's backstop.
 */
export async function stopTasksOfFinishedJobsTx(
  tx: Queryable,
  jobIds: string[],
  error: string | null,
): Promise<number> {
  const { rowCount } = await tx.query(
    `update tasks t
        set state = case when t.state = 'running' then t.state else 'cancelled' end,
            cancel_requested = t.cancel_requested or t.state = 'running',
            finished_at = case when t.state = 'running' then t.finished_at else now() end,
            queued_at = case when t.state = 'running' then t.queued_at end,
            error = coalesce(t.error, $2)
       from jobs j
      where t.job_id = any($1::uuid[]) and j.id = t.job_id
        and j.state in ('success', 'failed', 'cancelled')
        and t.state in ('waiting', 'queued', 'running', 'blocked')
        and not (t.state = 'running' and t.cancel_requested)`,
    [jobIds, error],
  );
  return rowCount ?? 0;
}

// Cancels and job creations wait for locks that busy jobs hold; give them more
// than the default 5 s before a wait counts as a failure.
export const LOCK_WAITING = { isolation: 'read committed', statementTimeoutMs: 30_000 } as const;

/** Cancels a job; a finished job is answered as it is. */
export async function cancelJob(pool: Pool, jobId: string, reason = 'cancelled'): Promise<JobRow> {
  return transaction(
    pool,
    async (tx) => {
      await cancelJobsTx(tx, [jobId], reason);
      const { rows } = await tx.query<JobRow>('select * from jobs where id = $1', [jobId]);
      if (!rows[0]) throw new NotFoundError(`job ${jobId} does not exist`);
      return rows[0];
    },
    LOCK_WAITING,
  );
}

/** Cancels the unfinished jobs of a pull request (it was closed); returns their ids. */
export async function cancelPullRequest(
  pool: Pool,
  projectId: string,
  pullRequest: number,
): Promise<string[]> {
  return transaction(
    pool,
    async (tx) => {
      const { rows } = await tx.query<{ id: string }>(
        `select id from jobs
          where project_id = $1 and pull_request = $2 and state = any($3::text[])`,
        [projectId, pullRequest, UNFINISHED_JOB_STATES],
      );
      return cancelJobsTx(
        tx,
        rows.map((r) => r.id),
        `pull request #${pullRequest} was closed`,
      );
    },
    LOCK_WAITING,
  );
}
