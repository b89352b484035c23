// A runner's report that an attempt ended. Most reports are successes without
// an error: the token check and the success are then one statement (the fast
// path). Anything else, and a success the fast path could not record, takes
// the general completion, with the error masked as the log is.
import type { AppContext } from '../context.ts';
import { workerTokenRequired } from '../http/auth.ts';
import {
  type Completion,
  type CompletionResult,
  completeSuccessByToken,
  completeTask,
} from '../scheduler/index.ts';
import { SecretDecryptError } from '../secrets.ts';
import { maskSecrets, taskSecretValues, WITHHELD_ERROR } from './logs.ts';
import { deliverJobStatus } from './statuses.ts';
import { requireWorkerByHash } from './workers.ts';

/** A completion as the runner reports it; the worker is the token's. */
export type CompleteReport = Omit<Completion, 'workerId'>;

/**
 * The error is shown in the job view: secrets are masked in it as in the log.
 * When the secrets cannot be opened (a key dropped from the keyring) the
 * outcome is still recorded, and the error is withheld rather than stored as
 * sent: blocking the outcome would strand the task until its lease expired.
 */
async function maskedError(ctx: AppContext, taskId: string, error: string): Promise<string> {
  try {
    return maskSecrets(error, await taskSecretValues(ctx.pool, ctx.keyring, taskId));
  } catch (err) {
    if (err instanceof SecretDecryptError) return WITHHELD_ERROR;
    throw err;
  }
}

/**
 * Records the outcome of the attempt the worker whose token hashes to
 * `tokenHash` holds under `report.leaseId` (a 401 for an unknown or revoked
 * token), then posts the job's status when the completion finished the job.
 */
export async function completeForToken(
  ctx: AppContext,
  tokenHash: Buffer,
  report: CompleteReport,
): Promise<Pick<CompletionResult, 'state' | 'job_state'>> {
  const successFirst = report.outcome === 'success' && !report.error;
  let workerId: string;
  if (successFirst) {
    // The common case: the token check and the success are one statement.
    const fast = await completeSuccessByToken(ctx.pool, tokenHash, {
      taskId: report.taskId,
      leaseId: report.leaseId,
      exitCode: report.exitCode,
      outputs: report.outputs,
      transient: report.transient,
    });
    if (!fast.workerId) throw workerTokenRequired();
    if (fast.result) {
      if (fast.result.job_state) await deliverJobStatus(ctx, fast.result.job_id);
      return { state: fast.result.state, job_state: fast.result.job_state };
    }
    workerId = fast.workerId;
  } else {
    workerId = (await requireWorkerByHash(ctx.pool, tokenHash)).id;
  }
  const error = report.error ? await maskedError(ctx, report.taskId, report.error) : null;
  const result = await completeTask(
    ctx.pool,
    { ...report, workerId, error },
    { successTried: successFirst },
  );
  if (result.job_state) await deliverJobStatus(ctx, result.job_id);
  return { state: result.state, job_state: result.job_state };
}
