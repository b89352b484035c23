// A runner's report that an attempt ended. Most reports are successes without
// an error: the token check, the success and its follow-up are then one call
// (the fast path, conductor_finish_success). Anything else, and a success the fast path could not record, takes
// the general completion. Outputs and the error are checked and masked first.
import type { AppContext } from '../context.ts';
import { workerTokenRequired } from '../http/auth.ts';
import {
  type Completion,
  type CompletionResult,
  completeSuccessByToken,
  completeTask,
} from '../scheduler/index.ts';
import { maskReport } from './logs.ts';
import { tasksClaimable } from './pickup.ts';
import { deliverJobStatus } from './statuses.ts';
import { requireWorkerByHash } from './workers.ts';

/** A completion as the runner reports it; the worker is the token's. */
export type CompleteReport = Omit<Completion, 'workerId'>;

/**
 * Records the outcome of the attempt the worker whose token hashes to
 * `tokenHash` holds under `report.leaseId` (a 401 for an unknown or revoked
 * token), then posts the job's status when the completion finished the job.
 */
export async function completeForToken(
  ctx: AppContext,
  tokenHash: Buffer,
  sent: CompleteReport,
): Promise<Pick<CompletionResult, 'state' | 'job_state'>> {
  // Outputs and the error are shown in the job view and outputs are handed to
  // the tasks that need them: undeclared or oversized outputs are refused and
  // secret values masked, before either way of recording the outcome. A
  // completion with neither (most of them) skips this, and a success stays
  // one round trip. Otherwise the token is checked first: nothing of the
  // task, its project or its secrets is read for a bad token (a 401).
  const hasReport = Object.keys(sent.outputs ?? {}).length > 0 || Boolean(sent.error);
  const successFirst = sent.outcome === 'success' && !sent.error;
  let workerId: string | null = null;
  let report: CompleteReport = sent;
  if (hasReport) {
    workerId = (await requireWorkerByHash(ctx.pool, tokenHash, sent.leaseId)).id;
    const masked = await maskReport(
      ctx.pool,
      ctx.keyring,
      { taskId: sent.taskId, leaseId: sent.leaseId, workerId },
      { outputs: sent.outputs ?? {}, error: sent.error ?? null },
    );
    report = { ...sent, outputs: masked.outputs, error: masked.error || null };
  }
  if (successFirst) {
    // The common case: the token check, the success and the follow-up in one call.
    const fast = await completeSuccessByToken(ctx.pool, tokenHash, {
      taskId: report.taskId,
      leaseId: report.leaseId,
      exitCode: report.exitCode,
      outputs: report.outputs,
      transient: report.transient,
    });
    if (fast.workerId === null) throw workerTokenRequired();
    if (fast.result) {
      await tasksClaimable(ctx, 'completion', fast.result.job_id);
      if (fast.result.job_state) await deliverJobStatus(ctx, fast.result.job_id);
      return { state: fast.result.state, job_state: fast.result.job_state };
    }
    // The success did not apply, or the call failed before answering (then
    // the token is checked now, and a success it committed is a repeat).
    workerId = fast.workerId ?? (await requireWorkerByHash(ctx.pool, tokenHash, sent.leaseId)).id;
  } else {
    workerId ??= (await requireWorkerByHash(ctx.pool, tokenHash, sent.leaseId)).id;
  }
  const result = await completeTask(
    ctx.pool,
    { ...report, workerId },
    { successTried: successFirst },
  );
  await tasksClaimable(ctx, 'completion', result.job_id);
  if (result.job_state) await deliverJobStatus(ctx, result.job_id);
  return { state: result.state, job_state: result.job_state };
}
