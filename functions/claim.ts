import { z } from 'zod';
import { claimForWorker } from '../lib/assignment.ts';
import { requireWorker } from '../lib/auth.ts';
import { getContext } from '../lib/context.ts';
import { type HttpEvent, httpFunction, jsonBody, type Reply } from '../lib/http/index.ts';

export const ClaimSchema = z.strictObject({
  labels: z.array(z.string().min(1).max(63)).max(50).optional(),
});

/** POST /v1/runner/claim */
async function main(event: HttpEvent): Promise<Reply> {
  const ctx = await getContext();
  const worker = await requireWorker(ctx.pool, event);
  const { labels } = jsonBody(event, ClaimSchema);
  const task = await claimForWorker(
    ctx.pool,
    ctx.keyring,
    worker,
    labels,
    ctx.config.CONDUCTOR_LEASE_S,
  );
  return task ? { status: 200, body: { task } } : { status: 204 };
}

export const handler = httpFunction(main);
