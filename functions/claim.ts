import { channelOffer } from '../lib/app/channel.ts';
import { answerFromClosedGate, claimForRunner } from '../lib/app/claim.ts';
import { MAX_CLAIM_WAIT_S } from '../lib/app/pickup.ts';
import { requireWorker } from '../lib/app/workers.ts';
import { getContext } from '../lib/context.ts';
import { ValidationError } from '../lib/errors.ts';
import { workerTokenHash } from '../lib/http/auth.ts';
import {
  clientGone,
  type HttpEvent,
  header,
  httpFunction,
  jsonBody,
  queryParams,
  type Reply,
} from '../lib/http/index.ts';
import * as z from '../lib/zod.ts';

export const ClaimSchema = z.strictObject({
  labels: z.optional(
    z.array(z.string().check(z.minLength(1), z.maxLength(63))).check(z.maxLength(50)),
  ),
});

/** `?wait=N`: a long poll of at most 25 s (what proxies let an idle answer take). */
export const ClaimQuerySchema = z.object({
  wait: z.optional(
    z.coerce
      .number({ message: 'must be a whole number of seconds' })
      .check(
        z.int('must be a whole number of seconds'),
        z.gte(0, 'must be at least 0'),
        z.lte(MAX_CLAIM_WAIT_S, `must be at most ${MAX_CLAIM_WAIT_S}`),
      ),
  ),
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
  context?: unknown,
  opts?: { signal?: AbortSignal },
): Promise<Reply> {
  const ctx = await getContext();
  const tokenHash = workerTokenHash(event);
  let labels: string[] | undefined;
  let key: string | null;
  let waitS: number | undefined;
  try {
    labels = jsonBody(event, ClaimSchema).labels;
    key = idempotencyKey(event);
    waitS = queryParams(event, ClaimQuerySchema).wait;
  } catch (err) {
    // A bad token is a 401 even when the body is bad too; a closed idle
    // gate says so from its bucket, without the database.
    if ((await answerFromClosedGate(ctx, tokenHash, undefined)) === undefined) {
      await requireWorker(ctx.pool, event);
    }
    throw err;
  }
  // The token check and the claim are one statement (one round trip). The
  // signal is middy's early timeout (a claim answered 503 is given back) or,
  // on the local server, the runner hanging up on a long poll: it stops
  // waiting, and a claim made meanwhile is given back.
  const gone = clientGone(context);
  const signals = [opts?.signal, gone].filter((s): s is AbortSignal => s !== undefined);
  const signal = signals.length > 1 ? AbortSignal.any(signals) : signals[0];
  const task = await claimForRunner(ctx, tokenHash, labels, { key, signal, waitS });
  if (task) return { status: 200, body: { task } };
  // A runner without the push channel asks for it (docs/runner.md, "The push
  // channel"); offered only where one is configured (AWS).
  const offer =
    header(event, 'conductor-channel') === 'want' ? await channelOffer(ctx, tokenHash) : undefined;
  return offer
    ? {
        status: 204,
        headers: { 'conductor-channel-url': offer.url, 'conductor-channel-ticket': offer.ticket },
      }
    : { status: 204 };
}

export const handler = httpFunction(main);
