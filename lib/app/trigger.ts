// Setting a job on its way once the transaction that made it committed: the
// one tail of every way a job comes to be or comes back (a webhook, a manual
// trigger, a rerun, an approval).
import type { AppContext } from '../context.ts';
import type { JobState } from '../states.ts';
import { dispatchCompile } from './dispatch.ts';
import { tasksClaimable } from './pickup.ts';
import { deliverJobStatus } from './statuses.ts';

/**
 * Dispatches the compile of a job that is `pending`, posts the statuses of
 * the jobs it cancelled (superseded ones), and posts its own status when it
 * is not pending: a `blocked` job waiting for approval, or a rerun already
 * running the first job's tasks, which no compile will report soon. A pending
 * job's status is posted by its compile.
 */
export async function triggerJob(
  ctx: AppContext,
  job: { id: string; state: JobState },
  cancelled: readonly string[] = [],
): Promise<void> {
  if (job.state === 'pending') await dispatchCompile(ctx, job.id);
  // Superseded jobs cancelled: their concurrency groups' places are free.
  if (cancelled.length > 0) await tasksClaimable(ctx, 'supersede');
  for (const jobId of cancelled) await deliverJobStatus(ctx, jobId);
  if (job.state !== 'pending') await deliverJobStatus(ctx, job.id);
}
