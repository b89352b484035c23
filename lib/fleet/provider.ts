// What a runner provider does (docs/runner.md, "Providers"): launch one
// runner for one ephemeral worker, say which of its runners still run, stop
// one. The core (lib/app/pools.ts) decides what to launch and when; a
// provider only carries it out, so EC2 or Kubernetes is one more file here.
import type * as z from '../zod.ts';
import type { PoolRow } from './pools.ts';

export interface LaunchSpec {
  /** The launch's id: unique, and the same on a retry of the same launch (an idempotency key). */
  launchId: string;
  /** The launch's try, from 1: a retry carries a new token. */
  attempt: number;
  pool: PoolRow;
  /** The project the worker is scoped to. */
  projectId: string;
  /** The control plane's URL, as the runner reaches it. */
  url: string;
  /**
   * The ephemeral worker's token: one claim, one task. A provider hands the
   * runner a reference to it (a variable of the child's own environment, a
   * parameter only the runner's role may read), never the value where others
   * can read it (a command line, a task override).
   */
  token: string;
}

/** Why a launch failed; `retryable` (capacity, throttling) backs off and tries again. */
export class LaunchError extends Error {
  constructor(
    message: string,
    readonly retryable: boolean,
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = 'LaunchError';
  }
}

export interface RunnerProvider {
  /** A pool's settings for this provider (a strict object: an unknown key is a 400 naming it). */
  readonly settings: z.ZodMiniType;
  /** Starts one runner; answers the provider's name for it (a pid, a task ARN). */
  launch(spec: LaunchSpec): Promise<string>;
  /** The names of the pool's runners that still run; undefined when the provider cannot say now. */
  running(pool: PoolRow, refs: string[]): Promise<Set<string> | undefined>;
  /** Stops one runner; a runner already gone is not an error. */
  stop(pool: PoolRow, ref: string): Promise<void>;
}

/** The providers a context offers, by a pool's `provider` name. */
export type Providers = Partial<Record<string, RunnerProvider>>;
