import { heartbeatTask } from '../lib/app/heartbeat.ts';
import { requireWorker } from '../lib/app/workers.ts';
import { getContext } from '../lib/context.ts';
import { type HttpEvent, httpFunction, idParam, jsonBody, type Reply } from '../lib/http/index.ts';
import { LeaseIdSchema } from '../lib/http/schemas.ts';
import * as z from '../lib/zod.ts';

export const HeartbeatSchema = z.strictObject({ lease_id: LeaseIdSchema });

/** POST /v1/runner/tasks/{id}/heartbeat */
async function main(event: HttpEvent): Promise<Reply> {
  const ctx = await getContext();
  const worker = await requireWorker(ctx.pool, event);
  const taskId = idParam(event, 'id', 'task');
  const { lease_id } = jsonBody(event, HeartbeatSchema);
  return { status: 200, body: await heartbeatTask(ctx, worker.id, taskId, lease_id) };
}

export const handler = httpFunction(main);
