// Races on a real PostgreSQL for scheduler tests: every racer has its own
// connection, all of them opened before the race starts, and the racers are
// released together so their snapshots overlap.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createPool, type Pool } from '../../lib/db/index.ts';
import { type ClaimedTask, cancelJob, claimTask } from '../../lib/scheduler/index.ts';
import type { JobRow, TaskSpec } from '../../lib/scheduler/types.ts';
import { barrier, spec, startedJob } from './fixtures.ts';

/** Where racers connect: a test file's database, and the name their connections show. */
export interface RaceDatabase {
  url: string;
  applicationName: string;
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * A pool on `db` with `n` connections already open, so no racer waits on a
 * connect while the others run. Ended by `withRacers`, or by the caller.
 */
export async function racePool(db: RaceDatabase, n: number): Promise<Pool> {
  const racers = createPool({ url: db.url, max: n, applicationName: db.applicationName });
  const clients = await Promise.all(Array.from({ length: n }, () => racers.connect()));
  for (const client of clients) client.release();
  return racers;
}

/** Runs `fn` with a `racePool` of `n` connections and ends the pool afterwards. */
export async function withRacers<T>(
  db: RaceDatabase,
  n: number,
  fn: (racers: Pool) => Promise<T>,
): Promise<T> {
  const racers = await racePool(db, n);
  try {
    return await fn(racers);
  } finally {
    await racers.end();
  }
}

/** Starts every function at the same moment and waits for all of them. */
export async function race<T>(fns: Array<() => Promise<T>>): Promise<PromiseSettledResult<T>[]> {
  const ready = barrier(fns.length);
  return Promise.allSettled(
    fns.map(async (fn) => {
      await ready();
      return fn();
    }),
  );
}

/** An error as `Name: message`, anything else as its string. */
export function describeError(e: unknown): string {
  return e instanceof Error ? `${e.name}: ${e.message}` : String(e);
}

/** The values of settled racers; fails naming every error when one threw. */
export function fulfilled<T>(results: PromiseSettledResult<T>[], what: string): T[] {
  const errors = results.flatMap((r) => (r.status === 'rejected' ? [r.reason] : []));
  assert.deepEqual(errors.map(describeError), [], `no ${what} throws`);
  return results.map((r) => (r as PromiseFulfilledResult<T>).value);
}

// Tasks of each test carry a label of their own and are claimed with only that
// label, so no test claims another's tasks (a task without labels is
// claimable by anyone).
let lanes = 0;

/** A label no other test uses. */
export function newLane(): string {
  return `lane-${++lanes}-${randomBytes(3).toString('hex')}`;
}

/** A task spec labelled with `lane`, claimable only by claims for that lane. */
export function laneSpec(lane: string, name: string, over: Partial<TaskSpec> = {}): TaskSpec {
  return spec(name, { labels: [lane], ...over });
}

/** Claims every queued task of `lane`, one after another on `pool`, and asserts how many. */
export async function claimAll(
  pool: Pool,
  worker: string,
  lane: string,
  expected: number,
): Promise<ClaimedTask[]> {
  const claimed: ClaimedTask[] = [];
  for (;;) {
    const task = await claimTask(pool, worker, [lane]);
    if (!task) break;
    claimed.push(task);
  }
  assert.equal(claimed.length, expected, `claimed every queued task of ${lane}`);
  return claimed;
}

/**
 * Starts a job of `width` tasks t0, t1, … (each with `over`) in a lane of its
 * own, on `pool`, and claims them all for `worker`.
 */
export async function claimedJob(
  pool: Pool,
  project: string,
  worker: string,
  width: number,
  over: Partial<TaskSpec> = {},
): Promise<{ lane: string; job: JobRow; claimed: ClaimedTask[] }> {
  const lane = newLane();
  const job = await startedJob(
    pool,
    project,
    Array.from({ length: width }, (_, i) => laneSpec(lane, `t${i}`, over)),
  );
  return { lane, job, claimed: await claimAll(pool, worker, lane, width) };
}

/**
 * Races a cancel of job `jobId` against `complete` of each claimed task, on
 * `racers`. Every racer is released by the barrier, then `pattern` (0 to 3)
 * picks the interleaving: 0, all at once (the completions take their row locks
 * first and the cancel retries behind them); 1 and 2, the completions held back
 * 1 to 4 ms or 2 to 12 ms, giving the cancel a head start (it commits while they
 * are in flight: snapshots that predate it conflict on the flagged rows and
 * retry); 3, two waves of half the tasks each, the cancel starting once the
 * first wave has finished and the second wave held back 2 to 12 ms. Only the
 * interleaving varies with this: no assertion should depend on timing.
 * Answers the settled racers, the cancel first, then the completions in the
 * order of `claimed`.
 */
export async function raceCancel<T>(
  racers: Pool,
  jobId: string,
  claimed: ClaimedTask[],
  pattern: number,
  complete: (task: ClaimedTask) => Promise<T>,
): Promise<PromiseSettledResult<JobRow | T>[]> {
  const half = claimed.length / 2;
  let firstWaveLeft = half;
  let firstWaveDone: () => void = () => {};
  const firstWave = new Promise<void>((r) => {
    firstWaveDone = r;
  });
  const headStart = () => sleep(pattern === 1 ? 1 + Math.random() * 3 : 2 + Math.random() * 10);
  return race<JobRow | T>([
    async () => {
      if (pattern === 3) await firstWave;
      return cancelJob(racers, jobId, 'race');
    },
    ...claimed.map((task, i) => async () => {
      if (pattern === 1 || pattern === 2) await headStart();
      if (pattern === 3 && i >= half) {
        await firstWave;
        await headStart();
      }
      try {
        return await complete(task);
      } finally {
        if (pattern === 3 && i < half && --firstWaveLeft === 0) firstWaveDone();
      }
    }),
  ]);
}
