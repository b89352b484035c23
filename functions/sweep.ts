import { injectLambdaContext } from '@aws-lambda-powertools/logger/middleware';
import middy from '@middy/core';
import type { Context } from 'aws-lambda';
import { getContext } from '../lib/context.ts';
import { hasOpenWork } from '../lib/idle/work.ts';
import { logger } from '../lib/log.ts';
import { runSweep } from '../lib/sweeper.ts';

// What the sweep leaves of the Lambda's time: one repair in flight when the
// deadline passes still has this long to finish (its lock waits give up
// after 2 s, a statement after 5 s).
const MARGIN_MS = 10_000;

/** The daily schedule's event: a sweep that does not ask the idle gate first. */
export const DAILY_EVENT = { conductor: 'daily' } as const;

/**
 * The EventBridge schedule (or any event): one sweep within the Lambda's
 * time, answering its counts and what became of the idle gate. With the gate
 * closed, the minute's sweep answers `{"gate": "closed"}` without a
 * connection; the daily one sweeps regardless (retention, and a backstop for
 * a gate left closed over work).
 */
async function main(event: unknown, context?: Partial<Context>) {
  const remaining = context?.getRemainingTimeInMillis?.();
  const deadline = remaining === undefined ? undefined : Date.now() + remaining - MARGIN_MS;
  const ctx = await getContext();
  const daily = (event as { conductor?: unknown } | null)?.conductor === DAILY_EVENT.conductor;
  const gate = ctx.gate;
  if (gate && !daily && !(await gate.store.isOpen())) return { gate: 'closed' as const };
  const summary = await runSweep(ctx, { deadline });
  if (!gate) return summary;
  // Closing takes two reads and a write; a sweep out of time leaves the gate
  // open, which costs the next sweep a connection and nothing else.
  if (deadline !== undefined && Date.now() > deadline) return { ...summary, gate: 'open' as const };
  const state = await gate.closeIfIdle(() => hasOpenWork(ctx.pool), { markerSeen: !daily });
  return { ...summary, gate: state };
}

// No early timeout: the sweep keeps its own deadline, and a compile that runs
// out of time is left pending for the sweep to dispatch again.
export const handler = middy({ timeoutEarlyInMillis: 0 })
  .use(injectLambdaContext(logger))
  .handler(main);
