import { z } from 'zod';
import { claimForToken } from '../lib/assignment.ts';
import { requireWorker, workerTokenHash } from '../lib/auth.ts';
import { getContext } from '../lib/context.ts';
import { type HttpEvent, httpFunction, jsonBody, type Reply } from '../lib/http/index.ts';
import { KnownClaimers } from '../lib/idle/claimers.ts';

// Claims the database accepted in this container: only those are answered
// from a closed idle gate (lib/idle/claimers.ts).
const known = new KnownClaimers();

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
  // A closed idle gate: no job is open, so nothing is claimable, and the
  // database (perhaps paused) is not woken to say so.
  const key = KnownClaimers.key(tokenHash, labels);
  if (ctx.gate && known.has(key) && !(await ctx.gate.mayHaveWork())) return { status: 204 };
  // The token check and the claim are one statement (one round trip).
  const task = await claimForToken(
    ctx.pool,
    ctx.keyring,
    tokenHash,
    labels,
    ctx.config.CONDUCTOR_LEASE_S,
  );
  known.remember(key);
  return task ? { status: 200, body: { task } } : { status: 204 };
}

export const handler = httpFunction(main);
