// Races on a real PostgreSQL for scheduler tests: every racer has its own
// connection, all of them opened before the race starts, and the racers are
// released together; a gate (gatedRace) proves they overlapped, and held
// locks (holdRows, untilWaiting) force one side to win.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after } from 'node:test';
import pg from 'pg';
import { createPool, type Pool } from '../../lib/db/index.ts';
import { type ClaimedTask, cancelJob, claimTask } from '../../lib/scheduler/index.ts';
import type { JobRow, TaskSpec } from '../../lib/scheduler/types.ts';
import { withDatabase } from '../../local/postgres.ts';
import { adminUrl } from './db.ts';
import { barrier, makeProject, spec, startedJob } from './fixtures.ts';

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
  const opened = await Promise.allSettled(Array.from({ length: n }, () => racers.connect()));
  for (const r of opened) if (r.status === 'fulfilled') r.value.release();
  const failed = opened.find((r) => r.status === 'rejected');
  if (failed) {
    // Close the ones that did open: a pool left with connections keeps the
    // test process (and the server's connection slots) alive after the tests.
    await racers.end();
    throw failed.reason;
  }
  return racers;
}

// The race test files hold up to 68 connections at once; two of them beside
// each other and another file pass PostgreSQL's default max_connections (100).
const HEAVY_LOCK = 7_341_002;

/**
 * Call at the top level of a test file that opens many connections at once,
 * before its database: on a server that allows fewer than 300 connections,
 * such files take turns, each holding a session advisory lock until its
 * tests are over, so the suite stays within the server's limit whichever
 * files the runner starts together. (The embedded server allows 400, and
 * they run side by side there.)
 */
export async function takeTurnWithOtherRaceFiles(): Promise<void> {
  // The maintenance database, which every run on the server shares: two
  // suites run at once on one server take turns too.
  const client = new pg.Client({
    connectionString: withDatabase(adminUrl(), 'postgres'),
    application_name: 'conductor-test-turn',
  });
  await client.connect();
  const { rows } = await client.query<{ n: number }>(
    `select current_setting('max_connections')::int as n`,
  );
  if (rows[0]!.n >= 300) {
    await client.end();
    return;
  }
  await client.query('select pg_advisory_lock($1)', [HEAVY_LOCK]);
  // Ending the session lets go of the lock, also if the process dies first.
  after(() => client.end());
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
 * `racers`. `pattern` (0 to 3) picks the interleaving: 0, all at once, behind
 * a gate on `tasks` (`gatedRace`: the cancel and every completion are inside
 * their statements at the same moment before any goes on); 1 and 2, the
 * completions held back 1 to 4 ms or 2 to 12 ms, giving the cancel a head
 * start (it commits while they are in flight: snapshots that predate it
 * conflict on the flagged rows and retry); 3, two waves of half the tasks
 * each, the cancel starting once the first wave has finished and the second
 * wave held back 2 to 12 ms. Which side wins which task varies with this and
 * with the machine: assert only what holds whoever wins (forced tests pin each
 * outcome). Answers the settled racers, the cancel first, then the
 * completions in the order of `claimed`.
 */
export async function raceCancel<T>(
  gate: { pool: Pool; db: RaceDatabase },
  racers: Pool,
  jobId: string,
  claimed: ClaimedTask[],
  pattern: number,
  complete: (task: ClaimedTask) => Promise<T>,
): Promise<PromiseSettledResult<JobRow | T>[]> {
  const cancel = () => cancelJob(racers, jobId, 'race');
  if (pattern === 0) {
    return gatedRace<JobRow | T>(gate.pool, gate.db, 'tasks', [
      cancel,
      ...claimed.map((task) => () => complete(task)),
    ]);
  }
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
      return cancel();
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

/** How many connections named `db.applicationName` wait for a heavyweight lock right now. */
export async function lockWaiters(pool: Pool, db: RaceDatabase): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    `select count(*)::int as n from pg_stat_activity
      where datname = current_database() and application_name = $1 and wait_event_type = 'Lock'`,
    [db.applicationName],
  );
  return rows[0]!.n;
}

/**
 * Polls `check` until it answers true, failing with `what` after `timeoutMs`:
 * a deadline for a condition, generous because a loaded machine is slow, never
 * a claim about how fast anything is.
 */
export async function until(
  what: string,
  check: () => boolean | Promise<boolean>,
  timeoutMs = 30_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) assert.fail(`timed out after ${timeoutMs} ms waiting until ${what}`);
    await sleep(5);
  }
}

/** Waits until at least `n` connections of `db` are visibly blocked on a lock (pg_stat_activity). */
export function untilWaiting(pool: Pool, db: RaceDatabase, n: number): Promise<void> {
  return until(
    `${n} connection(s) of ${db.applicationName} wait for a lock`,
    async () => (await lockWaiters(pool, db)) >= n,
  );
}

/** Lets go of a lock held by `holdRows` or `holdTable`. */
export type Release = () => Promise<void>;

async function holdOnOwnConnection(pool: Pool, lock: string, params: unknown[]): Promise<Release> {
  const client = await pool.connect();
  try {
    await client.query('begin');
    await client.query(lock, params);
  } catch (err) {
    client.release(err as Error);
    throw err;
  }
  let released = false;
  return async () => {
    if (released) return;
    released = true;
    try {
      // Nothing was written: rolling back only lets go of the lock.
      await client.query('rollback');
    } finally {
      client.release();
    }
  };
}

/** Locks the rows of `table` with these ids (`for update`) on a connection of its own. */
export function holdRows(pool: Pool, table: 'tasks' | 'jobs', ids: string[]): Promise<Release> {
  return holdOnOwnConnection(pool, `select 1 from ${table} where id = any($1::uuid[]) for update`, [
    ids,
  ]);
}

/**
 * Locks `table` in EXCLUSIVE mode on a connection of its own: plain reads go
 * on, and every statement that writes or locks a row of it waits.
 */
export function holdTable(pool: Pool, table: string): Promise<Release> {
  return holdOnOwnConnection(pool, `lock table ${table} in exclusive mode`, []);
}

/** A promise's outcome without throwing, as `Promise.allSettled` gives it. */
export async function settle<T>(promise: Promise<T>): Promise<PromiseSettledResult<T>> {
  return (await Promise.allSettled([promise]))[0]!;
}

/**
 * `race` behind a gate that proves the racers overlapped: `table` is locked
 * (`holdTable`) while the racers start, and let go only once `waiters` of
 * them (default: one per function) are blocked inside their statements at the
 * same time, as pg_stat_activity shows. Each racer's first statement must
 * write or lock a row of `table`. With more functions than connections, pass
 * the pool size: the rest wait for a connection in the pool, not on the server.
 */
export async function gatedRace<T>(
  pool: Pool,
  db: RaceDatabase,
  table: string,
  fns: Array<() => Promise<T>>,
  waiters = fns.length,
): Promise<PromiseSettledResult<T>[]> {
  const release = await holdTable(pool, table);
  let opened = false;
  let early = 0;
  const running = race(
    fns.map((fn) => async () => {
      try {
        return await fn();
      } finally {
        if (!opened) early++;
      }
    }),
  );
  let failure: unknown = null;
  try {
    await until(`${waiters} racers wait inside their statements at once`, async () => {
      if (early > 0) assert.fail(`${early} racer(s) finished before the gate opened`);
      return (await lockWaiters(pool, db)) >= waiters;
    });
  } catch (err) {
    failure = err;
  } finally {
    opened = true;
    await release();
  }
  const results = await running;
  if (failure) throw failure;
  return results;
}

/**
 * Creates, in a test file's own database, an audit of state changes: AFTER
 * triggers on jobs and tasks write one row per changed state, at the end of
 * each statement, and take no lock on jobs or tasks. `assertTransitions` reads
 * it, so a test can assert "exactly once" on transitions, not on end states
 * alone.
 */
export async function installAudit(pool: Pool): Promise<void> {
  await pool.query(`
    create table audit (
      seq bigserial primary key,
      kind text not null,
      id uuid not null,
      job_id uuid not null,
      old_state text not null,
      new_state text not null,
      cancel_requested boolean
    );
    create index audit_job on audit (job_id);
    create function audit_task() returns trigger language plpgsql as $$
    begin
      insert into audit (kind, id, job_id, old_state, new_state, cancel_requested)
      values ('task', new.id, new.job_id, old.state, new.state, new.cancel_requested);
      return null;
    end $$;
    create trigger audit_task after update on tasks
      for each row when (old.state is distinct from new.state) execute function audit_task();
    create function audit_job() returns trigger language plpgsql as $$
    begin
      insert into audit (kind, id, job_id, old_state, new_state)
      values ('job', new.id, new.id, old.state, new.state);
      return null;
    end $$;
    create trigger audit_job after update on jobs
      for each row when (old.state is distinct from new.state) execute function audit_job();
  `);
}

const FINAL = new Set(['success', 'failed', 'skipped', 'cancelled']);

/**
 * What the audit (`installAudit`) says about these jobs: no task ever leaves a
 * final state, no task is promoted twice, and each job leaves 'running' at
 * most once (exactly once when `finished`).
 */
export async function assertTransitions(
  pool: Pool,
  jobIds: string[],
  finished = true,
): Promise<void> {
  const { rows } = await pool.query<{
    kind: string;
    id: string;
    job_id: string;
    old_state: string;
    new_state: string;
  }>(
    `select kind, id, job_id, old_state, new_state from audit
      where job_id = any($1::uuid[]) order by seq`,
    [jobIds],
  );
  const revived = rows.filter((r) => FINAL.has(r.old_state));
  assert.deepEqual(revived, [], 'no job or task leaves a final state');
  const promotions = new Map<string, number>();
  const settles = new Map<string, string[]>(jobIds.map((id) => [id, []]));
  for (const r of rows) {
    if (r.kind === 'task' && r.old_state === 'waiting' && r.new_state === 'queued') {
      promotions.set(r.id, (promotions.get(r.id) ?? 0) + 1);
    }
    if (r.kind === 'job' && r.old_state === 'running') settles.get(r.job_id)!.push(r.new_state);
  }
  const twice = [...promotions].filter(([, n]) => n > 1);
  assert.deepEqual(twice, [], 'no task promoted twice');
  for (const [jobId, moves] of settles) {
    if (finished) assert.equal(moves.length, 1, `job ${jobId} left 'running' once: ${moves}`);
    else assert.ok(moves.length <= 1, `job ${jobId} left 'running' at most once: ${moves}`);
  }
}

/** A project with a forge token and an https repository: settles enqueue a commit status. */
export async function forgeProject(pool: Pool): Promise<string> {
  const id = await makeProject(pool);
  await pool.query(`update projects set forge_token_enc = 'sealed' where id = $1`, [id]);
  return id;
}

/** The final statuses (not 'pending') the outbox holds for each job, in order. */
export async function finalStatuses(
  pool: Pool,
  jobIds: string[],
): Promise<Map<string, Array<{ state: string; description: string }>>> {
  const { rows } = await pool.query<{ job_id: string; state: string; description: string }>(
    `select job_id, state, description from status_outbox
      where job_id = any($1::uuid[]) and state <> 'pending' order by id`,
    [jobIds],
  );
  const byJob = new Map<string, Array<{ state: string; description: string }>>(
    jobIds.map((id) => [id, []]),
  );
  for (const r of rows) byJob.get(r.job_id)!.push({ state: r.state, description: r.description });
  return byJob;
}

/**
 * For a file's racers on `db`: runs `first` until it is blocked on the lock
 * `hold` took, then `second` until it is blocked too, then lets go, so that
 * `first` gets the lock first. Answers both outcomes, settled.
 */
export function lockOrder(pool: Pool, db: RaceDatabase) {
  return async <A, B>(
    hold: Release,
    first: () => Promise<A>,
    second: () => Promise<B>,
  ): Promise<[PromiseSettledResult<A>, PromiseSettledResult<B>]> => {
    let a: Promise<PromiseSettledResult<A>> | undefined;
    let b: Promise<PromiseSettledResult<B>> | undefined;
    try {
      a = settle(first());
      await untilWaiting(pool, db, 1);
      b = settle(second());
      await untilWaiting(pool, db, 2);
    } finally {
      await hold();
    }
    return [await a!, await b!];
  };
}

/** A settled outcome's value; a rejection fails the test, naming `what` threw. */
export function settledValue<T>(r: PromiseSettledResult<T>, what: string): T {
  if (r.status === 'rejected') assert.fail(`${what} threw ${describeError(r.reason)}`);
  return r.value;
}
