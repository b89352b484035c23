import { randomUUID } from 'node:crypto';
import {
  type Pool,
  prepared,
  statementWithStats,
  TransactionConflictError,
  transaction,
} from '../db/index.ts';
import { endAttemptTx } from './attempt.ts';
import { DEFAULT_LEASE_S, type TaskRow } from './types.ts';

export interface ClaimOptions {
  leaseS?: number;
  /**
   * The new attempt's lease id, chosen before the statement is sent so that
   * a claim whose reply is lost can be given back (releaseClaim). Default: a
   * random one.
   */
  leaseId?: string;
  /**
   * The runner's Idempotency-Key: the same worker claiming again with the
   * same key while the lease it got lives is answered that same attempt.
   */
  key?: string | null;
  /** Immediate retries on 40001 or a deadlock before answering "nothing claimable". Default 10. */
  retries?: number;
  /** Called with the retries each claim took (metrics, the benchmark). */
  onRetries?: (retries: number) => void;
}

/** A claimed task with the facts about its job and project a runner needs. */
export interface ClaimedTask extends TaskRow {
  project_id: string;
  sha: string;
  ref: string;
  trusted: boolean;
  repo_url: string;
  /** The project's sealed forge token (lib/secrets), or null. */
  forge_token_enc: string | null;
  /** The outputs of the tasks this one needs: task name → output name → value. */
  needs_outputs: Record<string, Record<string, string>>;
}

// One statement, committed on its own at REPEATABLE READ (the pool's session
// default, lib/db/pool.ts): conductor_claim (migrations/007) answers a keyed
// claim's live attempt again, or, within the worker's project scope, takes over an
// expired lease of the worker's pool (docs/scheduling.md, "Lost runners") or
// locks the oldest job's queued task the labels allow (FOR UPDATE SKIP
// LOCKED: a task another claimer holds is passed over; a first pass takes
// only tasks no transaction touched since the snapshot, so one another
// claimer took and committed after it is passed over too (issue #36); when
// the fallback walk still reaches such a task it raises 40001, and the
// claim is retried at once with a fresh snapshot), sets it running under a
// new attempt and lease, and reads the job, the project and the outputs of
// the task's needs. In one snapshot that is consistent: a task this claim
// could lock was last changed before the snapshot, so its promotion, and
// every output committed before that promotion, are visible to it.
// `trusted` comes twice: the task's column, then the claim's (the job's and
// the task's together); node-pg keeps the last, which is the one to use.
/** The columns of a ClaimedTask, from a `conductor_claim(...) c` row. */
export const CLAIMED_COLUMNS = `(c.task).*, c.project_id, c.sha, c.ref, c.trusted, c.repo_url,
  c.forge_token_enc, c.needs_outputs`;

const CLAIM = `select ${CLAIMED_COLUMNS} from conductor_claim($1, $2::text[], $3, $4, $5) c`;

/**
 * Claims at most one queued task of a running job whose labels are all among
 * `labels`, oldest job first, under a new attempt and lease. Answers null when
 * nothing is claimable, and also when every retry lost a race: a claimer that
 * keeps losing polls again rather than failing. An empty claim writes nothing.
 */
export async function claimTask(
  pool: Pool,
  workerId: string,
  labels: string[],
  opts: ClaimOptions = {},
): Promise<ClaimedTask | null> {
  const leaseS = opts.leaseS ?? DEFAULT_LEASE_S;
  try {
    const { result, retries } = await statementWithStats<ClaimedTask>(
      pool,
      prepared('conductor_claim', CLAIM, [
        workerId,
        labels,
        leaseS,
        opts.leaseId ?? randomUUID(),
        opts.key ?? null,
      ]),
      // 40001 when another claimer took our candidate after our snapshot, or
      // a deadlock: retried at once; a claim that still loses answers null.
      { maxRetries: opts.retries ?? 10 },
    );
    opts.onRetries?.(retries);
    return result.rows[0] ?? null;
  } catch (err) {
    if (err instanceof TransactionConflictError) {
      opts.onRetries?.(err.retries);
      return null;
    }
    throw err;
  }
}

/** What releaseClaim did. */
export interface Released {
  jobId: string;
  taskId: string;
  /** The task ended (failed naming the cause, or cancelled): its job needs the follow-up. */
  ended: boolean;
  failed: boolean;
}

/**
 * Gives back a claim that never reached its runner: its answer could not be
 * assembled (a secret that cannot be opened, a read that failed), or the
 * statement's reply was lost (the connection dropped or went silent after it
 * was sent), or the request ran out of time. A claim that committed but
 * never reached its runner must leave neither a burnt attempt nor a lease
 * nobody holds. One transaction keyed on the lease, which the caller chose
 * before sending the claim: without `failure` the task goes back to the
 * queue as if the claim had not happened (the attempt is forgotten, not
 * counted); with it the task fails with that message (a cause that will not
 * pass, such as a missing key) and its dependents are skipped; either way,
 * when the job's cancel was requested meanwhile, the task ends cancelled
 * instead of going back to a queue nobody will take it from. An ephemeral
 * worker whose one claim this was may claim again. Does nothing, and answers
 * null, when no running task holds that lease (the claim never committed, or
 * its lease moved on), or when a repeat of the claim (its Idempotency-Key)
 * was answered that lease: the runner may hold it now.
 */
export async function releaseClaim(
  pool: Pool,
  leaseId: string,
  failure: string | null,
): Promise<Released | null> {
  return transaction(pool, async (tx) => {
    // task_attempts.lease_id is unique: one index lookup, then the task by key.
    // Both rows locked: a repeat of the claim that marked the attempt
    // answered again after this snapshot makes this raise 40001, and the
    // retry sees the mark and leaves the lease to the runner holding it.
    const { rows } = await tx.query<TaskRow>(
      `select t.* from task_attempts a join tasks t on t.id = a.task_id
        where a.lease_id = $1 and a.repeated_at is null
          and t.state = 'running' and t.lease_id = $1
          for update of t, a`,
      [leaseId],
    );
    const task = rows[0];
    if (!task) return null;
    await tx.query(
      `update workers set claimed_lease = null
        where id = $1 and ephemeral and claimed_lease = $2`,
      [task.worker_id, leaseId],
    );
    if (task.cancel_requested) {
      await endAttemptTx(tx, task, {
        state: 'cancelled',
        outcome: 'cancelled',
        transient: false,
        error: 'cancelled before the runner received the task',
      });
      return { jobId: task.job_id, taskId: task.id, ended: true, failed: false };
    }
    if (failure === null) {
      await tx.query('delete from task_attempts where task_id = $1 and attempt = $2', [
        task.id,
        task.attempt,
      ]);
      await tx.query(
        `update tasks set state = 'queued', attempt = attempt - 1, lease_id = null,
                          worker_id = null, lease_expires_at = null,
                          started_at = case when attempt = 1 then null else started_at end
          where id = $1`,
        [task.id],
      );
      return { jobId: task.job_id, taskId: task.id, ended: false, failed: false };
    }
    await endAttemptTx(tx, task, {
      state: 'failed',
      outcome: 'failed',
      transient: false,
      error: failure,
    });
    return { jobId: task.job_id, taskId: task.id, ended: true, failed: true };
  });
}
