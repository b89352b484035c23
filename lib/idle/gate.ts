// The idle gate: a marker that says "there may be work", kept outside
// PostgreSQL so that idle runners' claims, the scheduled sweep, the health
// check and anonymous pages can learn "there is no work" without a
// connection, and Aurora can pause. Beside the marker the gate's bucket holds
// what lets a closed gate refuse strangers without the database: the hashes
// of live worker tokens (lib/idle/workers.ts) and the webhook directory
// (lib/idle/intake.ts).
//
// The rules (docs/deploy.md, "The idle gate", has the proof):
//   1. Whatever commits work (a job created, approved or rerun; a status
//      queued) opens the gate AFTER its commit.
//   2. The sweep closes it in two phases: after seeing no work it writes a
//      `closing` marker, deletes the open marker, looks again, reopens if
//      work appeared, and only then removes `closing`. A sweep that finds
//      `closing` (its predecessor died mid-close) finishes that close first.
//   3. Claims and the sweep that find the gate closed do not connect; the
//      sweep does when the wake time the close left (a status retry, a
//      schedule) has come.
// In that order no work is left behind a closed gate: a writer's open either
// comes after the sweep's delete (the marker stays), or before it, and then
// its commit came before the delete too, so the sweep's second look sees it.
import { log } from '../log.ts';

export const OPEN_KEY = 'gate/open';
/** Written before a close deletes OPEN_KEY, removed when the close is decided. */
export const CLOSING_KEY = 'gate/closing';
/** When a closed gate must open by itself (ISO time): the earliest future work. */
export const WAKE_KEY = 'gate/wake-at';

/** The objects of the gate's bucket: S3 deployed (lib/idle/s3.ts), memory in tests. */
export interface GateStore {
  /** Whether the object exists (read through, never cached). */
  exists(key: string): Promise<boolean>;
  /** The object's text, or undefined when it does not exist. */
  read(key: string): Promise<string | undefined>;
  write(key: string, body: string): Promise<void>;
  /** Deletes the object; deleting one that does not exist is not an error. */
  remove(key: string): Promise<void>;
}

/** A bucket in this process's memory (tests). `calls` records every request. */
export class MemoryGateStore implements GateStore {
  readonly objects = new Map<string, string>([[OPEN_KEY, 'open']]);
  readonly calls: string[] = [];
  get marker(): boolean {
    return this.objects.has(OPEN_KEY);
  }
  set marker(open: boolean) {
    if (open) this.objects.set(OPEN_KEY, 'open');
    else this.objects.delete(OPEN_KEY);
  }
  async exists(key: string) {
    this.calls.push(`exists ${key}`);
    return this.objects.has(key);
  }
  async read(key: string) {
    this.calls.push(`read ${key}`);
    return this.objects.get(key);
  }
  async write(key: string, body: string) {
    this.calls.push(`write ${key}`);
    this.objects.set(key, body);
  }
  async remove(key: string) {
    this.calls.push(`remove ${key}`);
    this.objects.delete(key);
  }
}

export type GateState = 'open' | 'closed';

/** What a look at the database found: work that can proceed now, and when more will be due. */
export interface Look {
  work: boolean;
  /** The earliest time work that cannot proceed now becomes due (a status retry, a schedule). */
  wakeAt?: Date | null;
}

/** What the minute's sweep must do: sweep (the gate is open, a close is pending, or work came due) or nothing. */
export type SweepCall = 'open' | 'closing' | 'due' | 'closed';

/** Raised when one step of the gate did not finish in time. */
export class GateStepTimeout extends Error {}

/** Runs `work`, failing it after `ms` (the work itself is not stopped). */
export async function within<T>(ms: number, what: string, work: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, fail) => {
    timer = setTimeout(() => fail(new GateStepTimeout(`${what}: no answer within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([work, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** A cached answer of the bucket. */
interface Cached<T> {
  value: T;
  at: number;
}

const MAX_CACHED = 1_000;

/** The gate over a store, with an in-container cache for claims and pages. */
export class IdleGate {
  readonly store: GateStore;
  readonly cacheMs: number;
  /** The longest a bucket call may take (a look at the database: twice that). */
  readonly stepMs: number;
  #cached: Cached<boolean> | undefined;
  readonly #objects = new Map<string, Cached<string | undefined>>();

  constructor(store: GateStore, opts: { cacheMs?: number; stepMs?: number } = {}) {
    this.store = store;
    this.cacheMs = opts.cacheMs ?? 30_000;
    this.stepMs = opts.stepMs ?? 2_000;
  }

  /**
   * Whether a request should look in the database: the marker, read at most
   * once per `cacheMs` in this container. A store that cannot be read counts
   * as open: the gate may cost a connection, never a job.
   */
  async mayHaveWork(now = Date.now()): Promise<boolean> {
    if (this.#cached && now - this.#cached.at < this.cacheMs) return this.#cached.value;
    let open: boolean;
    try {
      open = await within(this.stepMs, 'reading the idle gate', this.store.exists(OPEN_KEY));
    } catch (err) {
      log('warn', 'could not read the idle gate; looking in the database', { err });
      return true;
    }
    this.#cached = { value: open, at: now };
    return open;
  }

  /**
   * An object of the bucket, read at most once per `cacheMs` (or `ttlMs`)
   * in this container (`forever`: kept once it exists, for markers that are
   * never removed). A gate with `cacheMs` 0 (tests) keeps nothing but those.
   * Throws when the bucket cannot be read.
   */
  async cachedRead(
    key: string,
    opts: { now?: number; forever?: boolean; ttlMs?: number } = {},
  ): Promise<string | undefined> {
    const now = opts.now ?? Date.now();
    const hit = this.#objects.get(key);
    const ttl = this.cacheMs === 0 ? 0 : (opts.ttlMs ?? this.cacheMs);
    if (hit && (now - hit.at < ttl || (opts.forever === true && hit.value !== undefined))) {
      return hit.value;
    }
    const value = await within(this.stepMs, `reading ${key}`, this.store.read(key));
    this.#objects.delete(key);
    this.#objects.set(key, { value, at: now });
    if (this.#objects.size > MAX_CACHED) this.#objects.delete(this.#objects.keys().next().value!);
    return value;
  }

  /** Writes an object and keeps it in this container's cache. */
  async write(key: string, body: string): Promise<void> {
    await within(this.stepMs, `writing ${key}`, this.store.write(key, body));
    this.#objects.set(key, { value: body, at: Date.now() });
  }

  /** Opens the gate; call it after the commit of whatever work it announces. */
  async open(): Promise<void> {
    await within(this.stepMs, 'opening the idle gate', this.store.write(OPEN_KEY, 'open'));
    this.#cached = { value: true, at: Date.now() };
  }

  /**
   * What the minute's sweep must do, from the bucket alone: sweep when the
   * gate is open, when a close was left pending (a sweep died in it), or when
   * the wake time a close left has come; else nothing. A bucket that cannot
   * be read answers "open": the sweep then connects, and loses nothing.
   */
  async sweepCall(now = Date.now()): Promise<SweepCall> {
    try {
      if (await within(this.stepMs, 'reading the gate', this.store.exists(OPEN_KEY))) {
        return 'open';
      }
      if (await within(this.stepMs, 'reading the close', this.store.exists(CLOSING_KEY))) {
        return 'closing';
      }
      const wake = await within(this.stepMs, 'reading the wake time', this.store.read(WAKE_KEY));
      if (wake !== undefined && !(Date.parse(wake) > now)) return 'due';
      return 'closed';
    } catch (err) {
      log('warn', 'could not read the idle gate; the sweep looks in the database', { err });
      return 'open';
    }
  }

  /**
   * The sweep's end: with no work in the database, closes the gate in two
   * phases (module comment) and answers what became of it. `markerSeen` says
   * whether the caller just read the marker as present; a sweep that ran
   * without it (the weekly one, or one finishing a pending close) opens a gate
   * it finds work behind. Each step is bounded by `stepMs`; a sweep that dies
   * anywhere in here leaves either an open gate or the `closing` marker, and
   * the next minute's sweep finishes the close.
   */
  async closeIfIdle(look: () => Promise<Look>, opts: { markerSeen: boolean }): Promise<GateState> {
    const first = await within(this.stepMs * 2, 'looking for work', look());
    if (first.work) {
      if (!opts.markerSeen) await this.open();
      await this.#remove(CLOSING_KEY);
      return 'open';
    }
    await this.#write(CLOSING_KEY, new Date().toISOString());
    await this.#remove(OPEN_KEY);
    this.#cached = undefined;
    let again: Look;
    try {
      again = await within(this.stepMs * 2, 'looking for work again', look());
    } catch (err) {
      // Not knowing is not "no work": open again, then fail.
      await this.open();
      throw err;
    }
    if (again.work) {
      await this.open();
      await this.#remove(CLOSING_KEY);
      return 'open';
    }
    if (again.wakeAt) await this.#write(WAKE_KEY, again.wakeAt.toISOString());
    else await this.#remove(WAKE_KEY);
    await this.#remove(CLOSING_KEY);
    return 'closed';
  }

  async #write(key: string, body: string): Promise<void> {
    await within(this.stepMs, `writing ${key}`, this.store.write(key, body));
  }
  async #remove(key: string): Promise<void> {
    await within(this.stepMs, `removing ${key}`, this.store.remove(key));
  }
}

/**
 * Opens the context's gate, if it has one, after a commit that made work:
 * tried three times. Never throws: the work is committed either way. A gate
 * left closed over work delays it until the next opening or the weekly sweep;
 * it loses nothing.
 */
export async function openGate(gate: IdleGate | undefined): Promise<void> {
  if (!gate) return;
  for (let attempt = 1; ; attempt++) {
    try {
      await gate.open();
      return;
    } catch (err) {
      if (attempt < 3) {
        await new Promise((done) => setTimeout(done, 100 * attempt));
        continue;
      }
      log(
        'error',
        'could not open the idle gate; idle runners see the work after the weekly sweep',
        { err },
      );
      return;
    }
  }
}
