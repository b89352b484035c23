import { injectLambdaContext } from '@aws-lambda-powertools/logger/middleware';
import middy from '@middy/core';
import type { Context } from 'aws-lambda';
import { withEcsProvider } from '../lib/app/fleet-aws.ts';
import { DAILY_EVENT, scheduledSweep } from '../lib/app/sweep.ts';
import { getContext } from '../lib/context.ts';
import { logger } from '../lib/log.ts';

// What the sweep leaves of the Lambda's time: one step in flight when the
// deadline passes still has this long to finish: a repair (its lock waits
// give up after 2 s, a statement after 5 s), or a schedule's fire (the
// forge's answer within 10 s, lib/forge/client.ts, then one transaction).
// A Lambda stopped mid-fire anyway loses nothing: the job and its tick
// commit together, or the schedule stays due.
const MARGIN_MS = 20_000;

/**
 * The EventBridge schedule (or any event): one scheduled sweep within the
 * Lambda's time (lib/app/sweep.ts); the weekly backstop event sweeps whatever the idle
 * gate says.
 */
async function main(event: unknown, context?: Partial<Context>) {
  const remaining = context?.getRemainingTimeInMillis?.();
  const deadline = remaining === undefined ? undefined : Date.now() + remaining - MARGIN_MS;
  const daily = (event as { conductor?: unknown } | null)?.conductor === DAILY_EVENT.conductor;
  return scheduledSweep(withEcsProvider(await getContext()), { deadline, daily });
}

// No early timeout: the sweep keeps its own deadline, and a compile that runs
// out of time is left pending for the sweep to dispatch again.
export const handler = middy({ timeoutEarlyInMillis: 0 })
  .use(injectLambdaContext(logger))
  .handler(main);
