import { z } from 'zod';
import { answerFromClosedGate, claimForRunner } from '../lib/app/claim.ts';
import { requireWorker } from '../lib/app/workers.ts';
import { getContext } from '../lib/context.ts';
import { ValidationError } from '../lib/errors.ts';
import { workerTokenHash } from '../lib/http/auth.ts';
import { type HttpEvent, header, httpFunction, jsonBody, type Reply } from '../lib/http/index.ts';

export const ClaimSchema = z.strictObject({
  labels: z.array(z.string().min(1).max(63)).max(50).optional(),
});

const MAX_KEY_LENGTH = 200;

/** The Idempotency-Key header, or null; a 400 naming it when it is too long. */
function idempotencyKey(event: HttpEvent): string | null {
  const key = header(event, 'idempotency-key');
  if (key === undefined || key === '') return null;
  if (key.length > MAX_KEY_LENGTH) {
    throw new ValidationError([
      { path: 'Idempotency-Key', message: `at most ${MAX_KEY_LENGTH} characters` },
    ]);
  }
  return key;
}

/** POST /v1/runner/claim */
async function main(
  event: HttpEvent,
  _context?: unknown,
  opts?: { signal?: AbortSignal },
): Promise<Reply> {
  const ctx = await getContext();
  const tokenHash = workerTokenHash(event);
  let labels: string[] | undefined;
  let key: string | null;
  try {
    labels = jsonBody(event, ClaimSchema).labels;
    key = idempotencyKey(event);
  } catch (err) {
    // A bad token is a 401 even when the body is bad too; a closed idle
    // gate says so from its bucket, without the database.
    if ((await answerFromClosedGate(ctx, tokenHash, undefined)) === undefined) {
      await requireWorker(ctx.pool, event);
    }
    throw err;
  }
  // The token check and the claim are one statement (one round trip). The
  // signal is middy's early timeout: a claim answered 503 is given back.
  const task = await claimForRunner(ctx, tokenHash, labels, { key, signal: opts?.signal });
  return task ? { status: 200, body: { task } } : { status: 204 };
}

export const handler = httpFunction(main);
