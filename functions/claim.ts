import { z } from 'zod';
import { claimForRunner } from '../lib/app/claim.ts';
import { requireWorker } from '../lib/app/workers.ts';
import { getContext } from '../lib/context.ts';
import { workerTokenHash } from '../lib/http/auth.ts';
import { type HttpEvent, httpFunction, jsonBody, type Reply } from '../lib/http/index.ts';

export const ClaimSchema = z.strictObject({
  labels: z.array(z.string().min(1).max(63)).max(50).optional(),
});

/** POST /v1/runner/claim */
async function main(event: HttpEvent): Promise<Reply> {
  const ctx = await getContext();
  const tokenHash = workerTokenHash(event);
  let labels: string[] | undefined;
  try {
    labels = jsonBody(event, ClaimSchema).labels;
  } catch (err) {
    // A bad token is a 401 even when the body is bad too.
    await requireWorker(ctx.pool, event);
    throw err;
  }
  // The token check and the claim are one statement (one round trip).
  const task = await claimForRunner(ctx, tokenHash, labels);
  return task ? { status: 200, body: { task } } : { status: 204 };
}

export const handler = httpFunction(main);
