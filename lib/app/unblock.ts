// Unblocking a block step (`POST /v1/jobs/{id}/tasks/{name}/unblock`, and the
// form on the job page): who may, the fields as the task's outputs, and the
// commit status after. The job's trust is never touched: a person answering a
// prompt vouches for the answer, not for the code of an untrusted job.
import type { AppContext } from '../context.ts';
import { ForbiddenError, NotFoundError, UnavailableError } from '../errors.ts';
import { unblockTask } from '../scheduler/block.ts';
import { getJobOnly, getJobView, type TaskView } from '../scheduler/index.ts';
import * as z from '../zod.ts';
import { ADMIN_BEARER, actorName, may, type Person } from './people.ts';
import { tasksClaimable } from './pickup.ts';
import { deliverJobStatus } from './statuses.ts';

/** The body of an unblock: the block's fields by name; each value a string. */
export const UnblockSchema = z.strictObject({
  fields: z.optional(z.record(z.string(), z.unknown())),
});
export type Unblock = z.infer<typeof UnblockSchema>;

/**
 * Who may unblock a task of this job: the one check, on `may` (lib/app/people.ts):
 * the admin token, or a signed-in person the forge says may write to the
 * repository. Answers the name recorded on the task; throws ForbiddenError
 * (or UnavailableError when the forge cannot say now) otherwise.
 */
export async function mayUnblock(ctx: AppContext, person: Person, jobId: string): Promise<string> {
  const job = await getJobOnly(ctx.pool, jobId);
  const decision = await may(ctx, person, job.project_id, 'unblock');
  if (!decision.allowed) {
    if (decision.status === 503) throw new UnavailableError(decision.reason);
    // One who may not view the project finds no job there, as a missing one.
    if (decision.status === 404) throw new NotFoundError(`job ${jobId} does not exist`);
    throw new ForbiddenError(decision.reason);
  }
  return actorName(person);
}

/** Unblocks a blocked task of a job with the fields given; answers the task as it is now. */
export async function unblockJobTask(
  ctx: AppContext,
  jobId: string,
  taskName: string,
  body: Unblock,
  who: Person | { via: 'token' | 'session' },
): Promise<TaskView> {
  // `{via}` is how callers named the admin before sign-in said who (#31).
  const person: Person = 'kind' in who ? who : ADMIN_BEARER;
  const name = await mayUnblock(ctx, person, jobId);
  const task = await unblockTask(ctx.pool, jobId, taskName, body.fields ?? {}, name);
  await tasksClaimable(ctx, 'unblock', jobId);
  await deliverJobStatus(ctx, jobId);
  const view = await getJobView(ctx.pool, jobId);
  const shown = view.tasks.find((t) => t.id === task.id);
  if (!shown) throw new Error(`task ${task.id} vanished after it was unblocked`);
  return shown;
}
