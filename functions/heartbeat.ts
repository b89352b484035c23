import { z } from 'zod';
import { getContext } from '../lib/context.ts';
import { requireWorker } from '../lib/http/auth.ts';
import { type HttpEvent, httpFunction, idParam, jsonBody, type Reply } from '../lib/http/index.ts';
import { LeaseIdSchema } from '../lib/http/schemas.ts';
import { heartbeat } from '../lib/scheduler/index.ts';

export const HeartbeatSchema = z.strictObject({ lease_id: LeaseIdSchema });

/** POST /v1/runner/tasks/{id}/heartbeat */
async function main(event: HttpEvent): Promise<Reply> {
  const ctx = await getContext();
  const worker = await requireWorker(ctx.pool, event);
  const taskId = idParam(event, 'id', 'task');
  const { lease_id } = jsonBody(event, HeartbeatSchema);
  const result = await heartbeat(ctx.pool, worker.id, taskId, lease_id, {
    leaseS: ctx.config.CONDUCTOR_LEASE_S,
  });
  return { status: 200, body: result };
}

export const handler = httpFunction(main);
