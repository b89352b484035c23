import { type Pool, prepared, type Queryable, statement, transaction } from '../db/index.ts';
import { ConflictError, NotFoundError, ValidationError } from '../errors.ts';
import type { JobState, TaskState } from '../states.ts';
import { endAttemptTx } from './attempt.ts';
import { followUpAfterCommit } from './progress.ts';
import { type AttemptRow, DEFAULT_LEASE_S, type TaskRow } from './types.ts';
import { workerByTokenFor } from './worker-token.ts';

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
  // One statement: a lease that moved on (or a task that never existed)
  // matches nothing, and only then is the task looked up to say which.
  const rows = await statement<{ lease_expires_at: Date; cancel_requested: boolean }>(
    pool,
    prepared(
      'conductor_heartbeat',
      `update tasks set lease_expires_at = now() + make_interval(secs => $4)
        where id = $1 and state = 'running' and lease_id = $2 and worker_id = $3
        returning lease_expires_at, cancel_requested`,
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
 * Records a task outcome under its current lease, then, in a statement opened
 * after that commit (and a transaction when a child became ready), promotes
 * the children that became ready and settles the job. Repeating a completion
 * with the same lease answers the same state.
 */
export async function completeTask(
  pool: Pool,
  c: Completion,
  opts: {
    /** completeSuccessByToken already tried the one-statement success: go straight to the transaction. */
    successTried?: boolean;
  } = {},
): Promise<CompletionResult> {
  const outputs = checkedOutputs(c.outputs);
  const outcome =
    (opts.successTried ? null : await recordSuccess(pool, c, outputs)) ??
    (await recordOutcome(pool, c, outputs));
  return afterOutcome(pool, outcome, c.taskId);
}

// A success reported with a worker token: the token check, the "seen" mark
// and the success statement in one round trip.
const SUCCESS_BY_TOKEN = `
  with ${workerByTokenFor('$3')}
  select w.id as worker_id,
         conductor_complete_success($2, $3, w.id, null, $4, $5, $6::jsonb) as job_id
    from worker w`;

/** What completeSuccessByToken found. */
export type SuccessByToken =
  /** The token is unknown or revoked: nothing was done. */
  | { workerId: null; result: null }
  /** The success applied (result), or did not (a repeat, a stale lease, a cancel flag: null). */
  | { workerId: string; result: CompletionResult | null };

/**
 * completeTask for a success without an error message, by the worker whose
 * bearer token hashes to `tokenHash`, authenticating in the same statement.
 * When the success did not apply, the caller calls completeTask for the
 * worker with `successTried`, which sorts out the repeat, the stale lease or
 * the cancel in a transaction.
 */
export async function completeSuccessByToken(
  pool: Pool,
  tokenHash: Buffer,
  c: Pick<Completion, 'taskId' | 'leaseId' | 'exitCode' | 'outputs' | 'transient'>,
): Promise<SuccessByToken> {
  const outputs = checkedOutputs(c.outputs);
  const rows = await statement<{ worker_id: string; job_id: string | null }>(
    pool,
    prepared('conductor_complete_success_by_token', SUCCESS_BY_TOKEN, [
      tokenHash,
      c.taskId,
      c.leaseId,
      c.exitCode ?? null,
      c.transient ?? false,
      JSON.stringify(outputs),
    ]),
  );
  const row = rows[0];
  if (!row) return { workerId: null, result: null };
  if (!row.job_id) return { workerId: row.worker_id, result: null };
  const outcome: Outcome = { state: 'success', jobId: row.job_id, final: true, repeated: false };
  return { workerId: row.worker_id, result: await afterOutcome(pool, outcome, c.taskId) };
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

/** The follow-up of a recorded outcome, and what the completion answers. */
async function afterOutcome(
  pool: Pool,
  outcome: Outcome,
  taskId: string,
): Promise<CompletionResult> {
  if (!outcome.final) return { state: outcome.state, job_state: null, job_id: outcome.jobId };
  // A repeat runs the follow-up again too: if the first one was lost (the
  // runner's connection dropped after the outcome committed), this finishes
  // it. Whichever follow-up settles the job reports it, a repeat's included:
  // the settle is conditional, so exactly one does, and the caller posts the
  // commit status on that report. Were a repeat's settle kept quiet, a
  // repeat that settled before the first completion's follow-up would leave
  // neither answer reporting, and the status to the sweep.
  const follow = await followUpAfterCommit(pool, outcome.jobId, taskId);
  return { state: outcome.state, job_state: follow?.jobState ?? null, job_id: outcome.jobId };
}

// The common outcome in one statement: a success under the current lease of a
// task whose job was not cancelled (conductor_complete_success, migrations/002:
// outputs, task and attempt commit together). Anything else, a repeat, a stale
// lease or a cancel flag included, answers null and goes to recordOutcome.
const SUCCESS = 'select conductor_complete_success($1, $2, $3, $4, $5, $6, $7::jsonb) as job_id';

async function recordSuccess(
  pool: Pool,
  c: Completion,
  outputs: Record<string, string>,
): Promise<Outcome | null> {
  if (c.outcome !== 'success') return null;
  const rows = await statement<{ job_id: string | null }>(
    pool,
    prepared('conductor_complete_success', SUCCESS, [
      c.taskId,
      c.leaseId,
      c.workerId,
      c.error ?? null,
      c.exitCode ?? null,
      c.transient ?? false,
      JSON.stringify(outputs),
    ]),
  );
  const jobId = rows[0]?.job_id;
  return jobId ? { state: 'success', jobId, final: true, repeated: false } : null;
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
