import { injectLambdaContext } from '@aws-lambda-powertools/logger/middleware';
import middy from '@middy/core';
import type { Context } from 'aws-lambda';
import { runSweep } from '../lib/app/sweep.ts';
import { getContext } from '../lib/context.ts';
import { logger } from '../lib/log.ts';

// What the sweep leaves of the Lambda's time: one repair in flight when the
// deadline passes still has this long to finish (its lock waits give up
// after 2 s, a statement after 5 s).
const MARGIN_MS = 10_000;

/** The EventBridge schedule (or any event): one sweep within the Lambda's time, answering its counts. */
async function main(_event: unknown, context?: Partial<Context>) {
  const remaining = context?.getRemainingTimeInMillis?.();
  const deadline = remaining === undefined ? undefined : Date.now() + remaining - MARGIN_MS;
  return runSweep(await getContext(), { deadline });
}

// No early timeout: the sweep keeps its own deadline, and a compile that runs
// out of time is left pending for the sweep to dispatch again.
export const handler = middy({ timeoutEarlyInMillis: 0 })
  .use(injectLambdaContext(logger))
  .handler(main);
