// Unblocking a block step (`POST /v1/jobs/{id}/tasks/{name}/unblock`, and the
// form on the job page): who may, the fields as the task's outputs, and the
// commit status after. The job's trust is never touched: a person answering a
// prompt vouches for the answer, not for the code of an untrusted job.
import { z } from 'zod';
import type { AppContext } from '../context.ts';
import { ForbiddenError } from '../errors.ts';
import { unblockTask } from '../scheduler/block.ts';
import { getJobView, type TaskView } from '../scheduler/index.ts';
import { deliverJobStatus } from './statuses.ts';

/** The body of an unblock: the block's fields by name; each value a string. */
export const UnblockSchema = z.strictObject({
  fields: z.record(z.string(), z.unknown()).optional(),
});
export type Unblock = z.infer<typeof UnblockSchema>;

/** Who asks to unblock: the admin token on the API, or a signed-in session on the job page. */
export type Unblocker =
  | { via: 'token' }
  | {
      via: 'session' /** The signed-in person's login, once sign-in says who; else the admin's session. */;
      login?: string;
    };

/**
 * Whether `who` may unblock a task of this job, as the name recorded on it;
 * throws ForbiddenError when not. Today both ways in are the admin's; sign-in
 * with the forge (#31) extends this with the person's write permission.
 */
export function mayUnblock(who: Unblocker, _jobId: string): string {
  if (who.via === 'token') return 'admin';
  if (who.login === undefined) return 'admin';
  if (who.login.trim() === '')
    throw new ForbiddenError('a signed-in person without a name may not unblock');
  return who.login;
}

/** Unblocks a blocked task of a job with the fields given; answers the task as it is now. */
export async function unblockJobTask(
  ctx: AppContext,
  jobId: string,
  taskName: string,
  body: Unblock,
  who: Unblocker,
): Promise<TaskView> {
  const name = mayUnblock(who, jobId);
  const task = await unblockTask(ctx.pool, jobId, taskName, body.fields ?? {}, name);
  await deliverJobStatus(ctx, jobId);
  const view = await getJobView(ctx.pool, jobId);
  const shown = view.tasks.find((t) => t.id === task.id);
  if (!shown) throw new Error(`task ${task.id} vanished after it was unblocked`);
  return shown;
}
