// Jittered exponential delays for polling and for retrying calls that did not
// get through.
import { setTimeout as sleep } from 'node:timers/promises';

/** Delays that start near `minMs`, double on each call of `next()` and stop growing at `maxMs`. */
export class Backoff {
  private step = 0;

  constructor(
    private readonly minMs: number,
    private readonly maxMs: number,
    private readonly random: () => number = Math.random,
  ) {}

  /** The next delay in milliseconds. */
  next(): number {
    const base = Math.min(this.maxMs, this.minMs * 2 ** this.step);
    this.step = Math.min(this.step + 1, 30);
    // ±20 % jitter, so runners started together drift apart instead of
    // polling in lock step; at the ceiling the jitter only goes down.
    const jittered = base * (0.8 + 0.4 * this.random());
    if (jittered <= this.maxMs) return Math.round(jittered);
    return Math.round(this.maxMs * (0.8 + 0.2 * this.random()));
  }

  /** `ms` kept between `minMs` and `maxMs`: a wait asked for from outside, held to this backoff's bounds. */
  clamp(ms: number): number {
    return Math.min(this.maxMs, Math.max(this.minMs, ms));
  }

  /** Starts again from `minMs`. */
  reset(): void {
    this.step = 0;
  }
}

/** Waits `ms`, or less if `signal` aborts first; never rejects. */
export async function pause(ms: number, signal?: AbortSignal): Promise<void> {
  if (signal?.aborted) return;
  try {
    await sleep(ms, undefined, signal ? { signal } : {});
  } catch {
    // Aborted: the caller looks at why.
  }
}
