// The after-commit hook where tasks may have become claimable, and the long
// poll that waits for it. Every transition that can make a task claimable
// calls tasksClaimable once its transaction has committed (never inside it):
// a compile that started a job, a completion (a follow-up promoted, a retry
// queued, a concurrency group freed), a claim given back, a sweep that
// requeued or ended something, an unblock, a cancel. The wake-up is a hint:
// the woken claims run conductor_claim like any other.
import type { AppContext } from '../context.ts';
import { log } from '../log.ts';
import { hintRunners } from './channel.ts';
import { afterTasksClaimable } from './pools.ts';

/** Which transition made tasks claimable (for the log line, and for whoever else listens). */
export type ClaimableWhy =
  | 'compile'
  | 'completion'
  | 'give-back'
  | 'sweep'
  | 'unblock'
  | 'cancel'
  | 'supersede';

/**
 * Called after each commit that may have made a task claimable: wakes the
 * waiting claims and the runners on the push channel, and lets the runner pools launch runners for what no idle
 * runner takes (lib/app/pools.ts). Never throws; what a hint leaves undone,
 * the next claim or the sweep does.
 */
export async function tasksClaimable(
  ctx: AppContext,
  why: ClaimableWhy,
  jobId?: string,
): Promise<void> {
  wakeClaims(ctx, why, jobId);
  // On AWS, the runners holding the push channel (lib/app/channel.ts): a
  // hint posted through API Gateway, never a grant.
  await Promise.all([hintRunners(ctx, jobId), afterTasksClaimable(ctx)]);
}

/** Wakes the waiting claims only (the sweep, which reconciles the pools itself). Never throws. */
export function wakeClaims(ctx: AppContext, why: ClaimableWhy, jobId?: string): void {
  const pickup = ctx.pickup;
  if (!pickup) return;
  try {
    pickup.announce();
  } catch (err) {
    // A hint lost costs the waiting runners the rest of their wait, no task.
    log('warn', 'pickup: could not announce claimable tasks', { err, why, job_id: jobId });
  }
}

/** The longest `wait` a claim may ask for, in seconds (what proxies allow an idle answer). */
export const MAX_CLAIM_WAIT_S = 25;

/**
 * Runs `claim` and, while it finds nothing, waits up to `waitS` for a
 * wake-up and claims again; answers null at the end of the wait. Without a
 * channel (none configured, as on AWS, or its connection down) it claims
 * once and answers at once, so the runner falls back to polling. No pool
 * connection is held while it waits: each claim is a statement of its own.
 */
export async function claimWithin<T>(
  ctx: AppContext,
  waitS: number,
  signal: AbortSignal | undefined,
  claim: () => Promise<T | null>,
): Promise<T | null> {
  const waiter = waitS > 0 ? ctx.pickup?.subscribe() : undefined;
  if (!waiter) return claim();
  // Subscribed before the first claim: a wake-up that comes while it runs is
  // kept, and the next wait ends at once.
  try {
    const until = Date.now() + Math.min(waitS, MAX_CLAIM_WAIT_S) * 1000;
    for (;;) {
      const found = await claim();
      if (found !== null) return found;
      const left = until - Date.now();
      if (left <= 0 || signal?.aborted) return null;
      if ((await waiter.wait(left, signal)) !== 'woken' || signal?.aborted) return null;
    }
  } finally {
    waiter.close();
  }
}
