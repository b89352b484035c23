import {
  type Pool,
  prepared,
  type Queryable,
  statement,
  transaction,
  unavailability,
} from '../db/index.ts';
import { ConflictError, NotFoundError, ValidationError } from '../errors.ts';
import { log } from '../log.ts';
import type { JobState, TaskState } from '../states.ts';
import { endAttemptTx } from './attempt.ts';
import { type FollowUpRow, followUpAfterCommit } from './progress.ts';
import { type AttemptRow, DEFAULT_LEASE_S, type TaskRow } from './types.ts';

const OUTPUT_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Tells a stale or foreign lease apart from a task that does not exist. */
async function leaseProblem(db: Queryable, taskId: string): Promise<Error> {
  const { rows } = await db.query('select 1 from tasks where id = $1', [taskId]);
  if (rows.length === 0) return new NotFoundError(`task ${taskId} does not exist`);
  return new ConflictError(
    `lease is not the task's current one (expired, or held by another worker)`,
  );
}

export interface HeartbeatResult {
  lease_expires_at: Date;
  /** The job was cancelled: the runner should stop the task and report it. */
  cancel: boolean;
}

/** Extends the lease of a running task; only the worker holding its current lease may. */
export async function heartbeat(
  pool: Pool,
  workerId: string,
  taskId: string,
  leaseId: string,
  opts: { leaseS?: number } = {},
): Promise<HeartbeatResult> {
  // One statement (migrations/functions/conductor_heartbeat.sql): a lease
  // that moved on (or a task that never existed) matches nothing, and only
  // then is the task looked up to say which.
  const rows = await statement<{ lease_expires_at: Date; cancel_requested: boolean }>(
    pool,
    prepared(
      'conductor_heartbeat',
      'select h.lease_expires_at, h.cancel_requested from conductor_heartbeat($1, $2, $3, $4) h',
      [taskId, leaseId, workerId, opts.leaseS ?? DEFAULT_LEASE_S],
    ),
  );
  const row = rows[0];
  if (!row) throw await leaseProblem(pool, taskId);
  return { lease_expires_at: row.lease_expires_at, cancel: row.cancel_requested };
}

export interface Completion {
  workerId: string;
  taskId: string;
  leaseId: string;
  outcome: 'success' | 'failed' | 'cancelled';
  exitCode?: number | null;
  outputs?: Record<string, string>;
  /** An infrastructure failure (clone, workspace, lost connection): retried while attempts remain. */
  transient?: boolean;
  error?: string | null;
}

export interface CompletionResult {
  /** The task's state after this completion ('queued' again after a transient failure with attempts left). */
  state: TaskState;
  /** The job's final state when this completion settled it, else null. */
  job_state: JobState | null;
  job_id: string;
}

interface Outcome {
  state: TaskState;
  jobId: string;
  /** A final state: children may be ready, or the job may be done. */
  final: boolean;
  repeated: boolean;
}

/**
 * Records a task outcome under its current lease, then, in a transaction
 * opened after that commit (and another when a child became ready), promotes
 * the children that became ready and settles the job. Repeating a completion
 * with the same lease answers the same state.
 */
export async function completeTask(
  pool: Pool,
  c: Completion,
  opts: {
    /** completeSuccessByToken already tried the success procedure: go straight to the transaction. */
    successTried?: boolean;
  } = {},
): Promise<CompletionResult> {
  const outputs = checkedOutputs(c.outputs);
  if (c.outcome === 'success' && !opts.successTried) {
    const fast = await finishSuccess(pool, c, null, outputs);
    if (fast?.job_id) return afterOutcome(pool, successOutcome(fast.job_id), c.taskId, fast);
  }
  return afterOutcome(pool, await recordOutcome(pool, c, outputs), c.taskId);
}

// The common outcome in one call: the success procedure
// (migrations/functions/conductor_finish_success.sql) records a success under
// the current lease of a task whose job was not cancelled (outputs, task and
// attempt), commits, and runs the follow-up in a transaction of its own
// opened after that commit: one round trip where a statement for the outcome
// and another for the follow-up took two (issue #36). With a token hash, the
// token check and the "seen" mark come first, in the success's transaction.
const FINISH = 'call conductor_finish_success($1, $2, $3, $4, $5, $6, $7, $8::jsonb)';

interface FinishRow extends FollowUpRow {
  /** The worker (the token's, when a hash was given); null: no such worker. */
  worker_id: string | null;
  /** The task's job when the success was recorded; null: nothing matched. */
  job_id: string | null;
}

/**
 * Calls the success procedure. A 40001 is retried by `statement` (the
 * second call finds either nothing recorded, or the success recorded and
 * matches nothing). A failure that passes (the connection lost, a lock or
 * statement timeout: lib/db/unavailable.ts) is thrown, as before the
 * procedure: the route answers 503 and the runner sends the completion
 * again; the success may have committed (the follow-up runs after the
 * commit), and the repeat finds it and runs the follow-up again. Any other
 * failure answers null, and the caller takes the general completion, which
 * answers a committed success as a repeat (and runs the follow-up), or
 * records it now.
 */
async function finishSuccess(
  pool: Pool,
  c: Pick<Completion, 'taskId' | 'leaseId' | 'error' | 'exitCode' | 'transient'> & {
    workerId: string | null;
  },
  tokenHash: Buffer | null,
  outputs: Record<string, string>,
): Promise<FinishRow | null> {
  try {
    const [row] = await statement<FinishRow>(
      pool,
      prepared('conductor_finish_success', FINISH, [
        c.taskId,
        c.leaseId,
        c.workerId,
        tokenHash,
        c.error ?? null,
        c.exitCode ?? null,
        c.transient ?? false,
        JSON.stringify(outputs),
      ]),
    );
    return row ?? null;
  } catch (err) {
    const kind = unavailability(err);
    if (kind !== undefined && kind !== 'contention') throw err;
    log('warn', 'success procedure failed; taking the general completion', {
      task_id: c.taskId,
      err,
    });
    return null;
  }
}

/** The outcome the success procedure recorded when it answers a job. */
const successOutcome = (jobId: string): Outcome => ({
  state: 'success',
  jobId,
  final: true,
  repeated: false,
});

/** What completeSuccessByToken found. */
export type SuccessByToken =
  /** The token is unknown or revoked: nothing was done. */
  | { workerId: null; result: null }
  /** The success applied (result), or did not (a repeat, a stale lease, a cancel flag: null). */
  | { workerId: string; result: CompletionResult | null }
  /** The call failed (the token may not have been checked): take the general completion. */
  | { workerId: undefined; result: null };

/**
 * completeTask for a success by the worker whose bearer token hashes to
 * `tokenHash`, authenticating in the same call. When the success did not
 * apply, the caller calls completeTask for the worker with `successTried`,
 * which sorts out the repeat, the stale lease or the cancel in a transaction.
 */
export async function completeSuccessByToken(
  pool: Pool,
  tokenHash: Buffer,
  c: Pick<Completion, 'taskId' | 'leaseId' | 'exitCode' | 'outputs' | 'transient'>,
): Promise<SuccessByToken> {
  const outputs = checkedOutputs(c.outputs);
  const row = await finishSuccess(pool, { ...c, workerId: null }, tokenHash, outputs);
  if (!row) return { workerId: undefined, result: null };
  if (!row.worker_id) return { workerId: null, result: null };
  if (!row.job_id) return { workerId: row.worker_id, result: null };
  return {
    workerId: row.worker_id,
    result: await afterOutcome(pool, successOutcome(row.job_id), c.taskId, row),
  };
}

function checkedOutputs(outputs: Record<string, string> = {}): Record<string, string> {
  const bad = Object.keys(outputs).filter((name) => !OUTPUT_NAME.test(name));
  if (bad.length > 0) {
    throw new ValidationError(
      bad.map((name) => ({
        path: `outputs.${name}`,
        message: 'output names are letters, digits and _',
      })),
    );
  }
  return outputs;
}

/** The follow-up of a recorded outcome (`done`: already run by the success procedure), and what the completion answers. */
async function afterOutcome(
  pool: Pool,
  outcome: Outcome,
  taskId: string,
  done?: FollowUpRow,
): Promise<CompletionResult> {
  if (!outcome.final) return { state: outcome.state, job_state: null, job_id: outcome.jobId };
  // A repeat runs the follow-up again too: if the first one was lost (the
  // runner's connection dropped after the outcome committed), this finishes
  // it. Whichever follow-up settles the job reports it, a repeat's included:
  // the settle is conditional, so exactly one does, and the caller posts the
  // commit status on that report. Were a repeat's settle kept quiet, a
  // repeat that settled before the first completion's follow-up would leave
  // neither answer reporting, and the status to the sweep.
  const follow = await followUpAfterCommit(pool, outcome.jobId, taskId, done);
  return { state: outcome.state, job_state: follow?.jobState ?? null, job_id: outcome.jobId };
}

/** Any outcome, a repeat, or a lease problem, in a transaction that locks the task. */
async function recordOutcome(
  pool: Pool,
  c: Completion,
  outputs: Record<string, string>,
): Promise<Outcome> {
  return transaction(pool, async (tx): Promise<Outcome> => {
    // FOR UPDATE: a cancel or a sweep that committed after our snapshot makes
    // this raise 40001, and the retry sees the cancel flag or the new lease.
    const found = await tx.query<TaskRow>('select * from tasks where id = $1 for update', [
      c.taskId,
    ]);
    const task = found.rows[0];
    if (!task) throw new NotFoundError(`task ${c.taskId} does not exist`);

    if (task.state !== 'running' || task.lease_id !== c.leaseId || task.worker_id !== c.workerId) {
      const previous = await tx.query<AttemptRow>(
        'select * from task_attempts where task_id = $1 and lease_id = $2',
        [c.taskId, c.leaseId],
      );
      const attempt = previous.rows[0];
      if (
        attempt?.finished_at &&
        attempt.worker_id === c.workerId &&
        attempt.reported_outcome === c.outcome &&
        attempt.result_state
      ) {
        return {
          state: attempt.result_state,
          jobId: task.job_id,
          final: attempt.result_state !== 'queued',
          repeated: true,
        };
      }
      throw new ConflictError(
        `lease is not the task's current one (expired, completed, or held by another worker)`,
      );
    }

    let state: TaskState;
    if (task.cancel_requested) state = 'cancelled';
    else if (c.outcome === 'success') state = 'success';
    else if (c.outcome === 'cancelled') state = 'cancelled';
    else if (c.transient && task.attempt < task.max_attempts) state = 'queued';
    else state = 'failed';

    const error =
      state === 'cancelled' && task.cancel_requested ? (c.error ?? 'cancelled') : (c.error ?? null);
    // Outputs first: once the task is final its children may be promoted.
    if (state === 'success' && Object.keys(outputs).length > 0) {
      await tx.query(
        `insert into task_outputs (task_id, name, value)
         select $1, key, value from jsonb_each_text($2::jsonb)
         on conflict (task_id, name) do update set value = excluded.value`,
        [task.id, JSON.stringify(outputs)],
      );
    }
    await endAttemptTx(tx, task, {
      state,
      outcome: state === 'queued' ? 'failed' : state === 'success' ? 'success' : state,
      transient: c.transient ?? false,
      error,
      exitCode: c.exitCode ?? null,
      reported: c.outcome,
    });
    return { state, jobId: task.job_id, final: state !== 'queued', repeated: false };
  });
}
