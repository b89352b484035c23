// The waiting claims of one process, and the in-process channel.
/** How a wait ended: a wake-up, its time, the channel going down, or the caller giving up. */
export type WaitEnd = 'woken' | 'timeout' | 'down' | 'aborted';

/** A claim's subscription, taken before it claims, so a wake-up between the claim and the wait is kept. */
export interface Waiter {
  /** Resolves on the first wake-up since the subscription (or the last `wait`), after `ms`, or when the channel is down. */
  wait(ms: number, signal?: AbortSignal): Promise<WaitEnd>;
  /** Ends the subscription. */
  close(): void;
}

/** Where wake-ups come from and go to (one per process). */
export interface Pickup {
  /** Whether a long poll may wait now: false while the channel is down, and a claim then answers at once. */
  readonly live: boolean;
  /** Wakes every waiting claim, in this process and (through the channel) every other; never throws. */
  announce(): void;
  /** A new subscription for one claim. */
  subscribe(): Waiter;
  /** Stops listening; every waiting claim ends as `down`. */
  close(): Promise<void>;
}

interface Subscription {
  pending: WaitEnd | undefined;
  resolve: ((end: WaitEnd) => void) | undefined;
}

/**
 * The waiting claims of one process and their wake-ups. Used alone it is the
 * in-process channel (one server process, nothing else to tell); the
 * PostgreSQL channel feeds it from its listening connection.
 */
export class Waiters {
  private readonly subs = new Set<Subscription>();

  /** How many claims are subscribed now. */
  get size(): number {
    return this.subs.size;
  }

  /** Ends every current wait (or the next one) with `end`. */
  wake(end: WaitEnd = 'woken'): void {
    for (const sub of this.subs) {
      if (sub.resolve) {
        const resolve = sub.resolve;
        sub.resolve = undefined;
        resolve(end);
      } else {
        sub.pending = end;
      }
    }
  }

  subscribe(live: () => boolean): Waiter {
    const sub: Subscription = { pending: undefined, resolve: undefined };
    this.subs.add(sub);
    return {
      wait: (ms, signal) => {
        if (!live()) return Promise.resolve('down');
        if (sub.pending) {
          const end = sub.pending;
          sub.pending = undefined;
          return Promise.resolve(end);
        }
        if (signal?.aborted) return Promise.resolve('aborted');
        return new Promise<WaitEnd>((resolve) => {
          const finish = (end: WaitEnd) => {
            clearTimeout(timer);
            signal?.removeEventListener('abort', onAbort);
            sub.resolve = undefined;
            resolve(end);
          };
          const onAbort = () => finish('aborted');
          const timer = setTimeout(() => finish('timeout'), Math.max(0, ms));
          signal?.addEventListener('abort', onAbort, { once: true });
          sub.resolve = finish;
        });
      },
      close: () => {
        this.subs.delete(sub);
        sub.resolve?.('aborted');
      },
    };
  }
}

/** The channel within one process: a server that is the only one on its database. */
export class InProcessPickup implements Pickup {
  private readonly waiters = new Waiters();
  private closed = false;

  get live(): boolean {
    return !this.closed;
  }

  announce(): void {
    this.waiters.wake('woken');
  }

  subscribe(): Waiter {
    return this.waiters.subscribe(() => this.live);
  }

  async close(): Promise<void> {
    this.closed = true;
    this.waiters.wake('down');
  }
}
