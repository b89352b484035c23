import middy from '@middy/core';
import { getContext } from '../lib/context.ts';
import { runSweep } from '../lib/sweeper.ts';

/** The EventBridge schedule (or any event): one sweep, answering its counts. */
async function main() {
  return runSweep(await getContext());
}

export const handler = middy({ timeoutEarlyInMillis: 0 }).handler(main);
