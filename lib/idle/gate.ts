// The idle gate: a marker that says "there may be work", kept outside
// PostgreSQL so that idle runners' claims and the scheduled sweep can learn
// "there is no work" without a connection, and Aurora can pause.
//
// The rules (docs/deploy.md, "The idle gate", has the proof):
//   1. Whatever commits work (a job created, approved or rerun; a status
//      queued) opens the gate AFTER its commit.
//   2. The sweep closes it only after seeing no work, and then looks again;
//      if work appeared meanwhile, it opens the gate again.
//   3. Claims and the sweep that find the gate closed do not connect.
// In that order no work is left behind a closed gate: a writer's open either
// comes after the sweep's close (the marker stays), or before it, and then
// its commit came before the close too, so the sweep's second look sees it.
import { log } from '../log.ts';

/** Where the marker lives: S3 deployed (lib/idle/s3.ts), memory in tests. */
export interface GateStore {
  /** Whether the marker exists (read through, never cached). */
  isOpen(): Promise<boolean>;
  /** Writes the marker. */
  open(): Promise<void>;
  /** Deletes the marker. */
  close(): Promise<void>;
}

/** A marker in this process's memory (tests). */
export class MemoryGateStore implements GateStore {
  marker = true;
  async isOpen() {
    return this.marker;
  }
  async open() {
    this.marker = true;
  }
  async close() {
    this.marker = false;
  }
}

export type GateState = 'open' | 'closed';

/** The gate over a store, with a short in-container cache for claims. */
export class IdleGate {
  readonly store: GateStore;
  readonly cacheMs: number;
  #cached: { open: boolean; at: number } | undefined;

  constructor(store: GateStore, opts: { cacheMs?: number } = {}) {
    this.store = store;
    this.cacheMs = opts.cacheMs ?? 5_000;
  }

  /**
   * Whether a claim should look in the database: the marker, read at most
   * once per `cacheMs` in this container. A store that cannot be read counts
   * as open: the gate may cost a connection, never a job.
   */
  async mayHaveWork(now = Date.now()): Promise<boolean> {
    if (this.#cached && now - this.#cached.at < this.cacheMs) return this.#cached.open;
    let open: boolean;
    try {
      open = await this.store.isOpen();
    } catch (err) {
      log('warn', 'could not read the idle gate; looking in the database', { err });
      return true;
    }
    this.#cached = { open, at: now };
    return open;
  }

  /** Opens the gate; call it after the commit of whatever work it announces. */
  async open(): Promise<void> {
    await this.store.open();
    this.#cached = { open: true, at: Date.now() };
  }

  /**
   * The sweep's end: with no work in the database, closes the gate, looks
   * again, and opens it again when work appeared in between. `markerSeen`
   * says whether the caller just read the marker as present; a sweep that
   * ran without looking (the daily one) opens a gate it finds work behind.
   */
  async closeIfIdle(
    hasWork: () => Promise<boolean>,
    opts: { markerSeen: boolean },
  ): Promise<GateState> {
    if (await hasWork()) {
      if (!opts.markerSeen) await this.open();
      return 'open';
    }
    await this.store.close();
    this.#cached = undefined;
    let again: boolean;
    try {
      again = await hasWork();
    } catch (err) {
      // Not knowing is not "no work": open again, then fail.
      await this.open();
      throw err;
    }
    if (again) {
      await this.open();
      return 'open';
    }
    return 'closed';
  }
}

/**
 * Opens the context's gate, if it has one, after a commit that made work.
 * Never throws: the work is committed either way. A gate left closed over
 * work delays it until the next opening or the daily sweep; it loses nothing.
 */
export async function openGate(gate: IdleGate | undefined): Promise<void> {
  if (!gate) return;
  try {
    await gate.open();
  } catch (err) {
    log('error', 'could not open the idle gate; idle runners see the work after the daily sweep', {
      err,
    });
  }
}
