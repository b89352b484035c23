import { appendLog, MAX_CHUNK_BYTES } from '../lib/app/logs.ts';
import { requireWorker } from '../lib/app/workers.ts';
import { getContext } from '../lib/context.ts';
import { type HttpEvent, httpFunction, idParam, jsonBody, type Reply } from '../lib/http/index.ts';
import { LeaseIdSchema } from '../lib/http/schemas.ts';
import * as z from '../lib/zod.ts';

export const LogChunkSchema = z.strictObject({
  lease_id: LeaseIdSchema,
  offset: z.number().check(z.int(), z.gte(0), z.lte(Number.MAX_SAFE_INTEGER)),
  data: z.string(),
});

/** POST /v1/runner/tasks/{id}/logs */
async function main(event: HttpEvent): Promise<Reply> {
  const ctx = await getContext();
  const worker = await requireWorker(ctx.pool, event);
  const taskId = idParam(event, 'id', 'task');
  const chunk = jsonBody(event, LogChunkSchema);
  const result = await appendLog(ctx.pool, ctx.keyring, {
    workerId: worker.id,
    taskId,
    leaseId: chunk.lease_id,
    offset: chunk.offset,
    data: chunk.data,
    maxBytes: ctx.config.CONDUCTOR_LOG_MAX_BYTES,
    jobMaxBytes: ctx.config.CONDUCTOR_JOB_LOG_MAX_BYTES,
  });
  return { status: 200, body: result };
}

// A 1 MiB chunk grows when JSON escapes it; leave room, then let appendLog
// apply the exact limit to the bytes.
export const handler = httpFunction(main, { maxBodyBytes: 6 * MAX_CHUNK_BYTES + 4096 });
