// The admin API's actions on jobs: a manual trigger, cancel, approve and
// rerun. Each changes the job in the scheduler's transaction, then sets it on
// its way (triggerJob) or posts its status.
import { z } from 'zod';
import type { AppContext } from '../context.ts';
import { approveJob, cancelJob, createJob, type JobRow, rerunJob } from '../scheduler/index.ts';
import { getJobOnly, type JobView } from '../scheduler/views.ts';
import { getProject } from './projects.ts';
import { deliverJobStatus } from './statuses.ts';
import { triggerJob } from './trigger.ts';

const SHA = /^[0-9a-f]{40}([0-9a-f]{24})?$/;

export const TriggerSchema = z.strictObject({
  ref: z
    .string()
    .min(1)
    .max(1024)
    .refine((r) => !/\s/.test(r), 'must not contain white space'),
  sha: z
    .string()
    .transform((s) => s.toLowerCase())
    .refine((s) => SHA.test(s), 'must be a full commit sha (40 or 64 hex digits)'),
});
export type Trigger = z.infer<typeof TriggerSchema>;

export const RerunSchema = z.strictObject({ failed_only: z.boolean().default(false) });

/**
 * A trusted job of the project for a commit, asked for by an admin; a ref
 * without `refs/` names a branch. It supersedes the ref's unfinished jobs as
 * a push would.
 */
export async function startManualJob(
  ctx: AppContext,
  projectId: string,
  { ref, sha }: Trigger,
): Promise<JobRow> {
  await getProject(ctx.pool, projectId);
  const { job, superseded } = await createJob(ctx.pool, {
    projectId,
    ref: ref.startsWith('refs/') ? ref : `refs/heads/${ref}`,
    sha,
    trigger: 'manual',
    trusted: true,
  });
  await triggerJob(ctx, job, superseded);
  return job;
}

/** Cancels a job (a 409 once it is finished) and posts its status; answers the job as cancelled. */
export async function cancelJobNow(ctx: AppContext, jobId: string): Promise<JobView> {
  await cancelJob(ctx.pool, jobId, 'cancelled through the API');
  await deliverJobStatus(ctx, jobId);
  return getJobOnly(ctx.pool, jobId);
}

/** Lets a blocked job go on; answers it as approved (pending), then dispatches its compile. */
export async function approveBlockedJob(ctx: AppContext, jobId: string): Promise<JobView> {
  const approved = await approveJob(ctx.pool, jobId);
  const view = await getJobOnly(ctx.pool, jobId);
  await triggerJob(ctx, approved);
  return view;
}

/** Runs a finished job again as a new job (only its failed tasks with `failedOnly`). */
export async function rerunFinishedJob(
  ctx: AppContext,
  jobId: string,
  failedOnly: boolean,
): Promise<JobRow> {
  const { job } = await rerunJob(ctx.pool, jobId, failedOnly);
  await triggerJob(ctx, job);
  return job;
}
