// A seeded, randomized soak of the scheduler: runners that claim, finish, fail,
// vanish, heartbeat and repeat themselves, two sweepers and a canceller, all at
// once against one database for a bounded time. Afterwards every lease is
// expired, the sweep runs until it has nothing left to do, the rest is drained,
// and the invariants the design promises are checked with SQL.
//   SOAK_SEED=123 npm run test:unit -- test/scheduler/soak.test.ts   replays a seed's choices
// (the interleaving still depends on timing, so a replay is similar, not identical).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { TransactionConflictError } from '../../lib/db/index.ts';
import { ConflictError } from '../../lib/errors.ts';
import {
  type ClaimedTask,
  type Completion,
  type CompletionResult,
  cancelJob,
  claimTask,
  completeTask,
  heartbeat,
  type SweepSummary,
  sweep,
  type TaskSpec,
} from '../../lib/scheduler/index.ts';
import { testDatabase } from '../helpers/db.ts';
import { makeProject, makeWorker, spec, startedJob } from '../helpers/fixtures.ts';

const seed = process.env.SOAK_SEED
  ? Number.parseInt(process.env.SOAK_SEED, 10) >>> 0
  : Math.floor(Math.random() * 2 ** 32);
console.log('soak seed', seed);

const { pool } = await testDatabase(import.meta.filename, { poolMax: 24 });

const INITIAL_JOBS = 30;
const LATE_JOBS = 40;
const RUNNERS = 12;
const SWEEPERS = 2;
const RUN_MS = Number(process.env.SOAK_MS ?? 9_000);
const MAX_CLAIMS = 4_000;

/** mulberry32: a small, fast, seedable PRNG answering floats in [0, 1). */
function mulberry32(state: number): () => number {
  let a = state >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

class Random {
  readonly next: () => number;
  constructor(state: number) {
    this.next = mulberry32(state);
  }
  /** An integer in [lo, hi]. */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
  pick<T>(items: readonly T[]): T {
    return items[Math.floor(this.next() * items.length)]!;
  }
}

/** A random DAG of 5-15 tasks, each needing up to three earlier ones. */
function randomDag(rng: Random): TaskSpec[] {
  const n = rng.int(5, 15);
  const tasks: TaskSpec[] = [];
  for (let i = 0; i < n; i++) {
    const needs = new Set<string>();
    if (i > 0 && !rng.chance(0.25)) {
      const k = rng.int(1, Math.min(3, i));
      for (let j = 0; j < k; j++) needs.add(`t${rng.int(0, i - 1)}`);
    }
    const outputs = rng.chance(0.25) ? (rng.chance(0.5) ? ['version'] : ['version', 'digest']) : [];
    tasks.push(
      spec(`t${i}`, {
        needs: [...needs],
        outputs,
        allowFailure: rng.chance(0.2),
        maxAttempts: rng.int(1, 3),
      }),
    );
  }
  return tasks;
}

const stats = {
  claims: 0,
  emptyClaims: 0,
  completions: 0,
  repeats: 0,
  heartbeats: 0,
  vanished: 0,
  conflicts: 0,
  sweeps: 0,
  cancels: 0,
  cancelled: 0,
  lateJobs: 0,
};
const repaired = { leases: 0, requeued: 0, promoted: 0, settled: 0, timedOut: 0 };
const unexpected: string[] = [];

function describe(err: unknown): string {
  if (err instanceof Error) return `${err.name}: ${err.message}`;
  return String(err);
}

function noteUnexpected(what: string, err: unknown): void {
  unexpected.push(`${what}: ${describe(err)}`);
}

/** A 409 about a lease: expected in a soak. A transaction that kept conflicting is not. */
function isStaleLease(err: unknown): boolean {
  return err instanceof ConflictError && !(err instanceof TransactionConflictError);
}

function addSweep(s: SweepSummary): void {
  stats.sweeps++;
  repaired.leases += s.leases_expired;
  repaired.requeued += s.tasks_requeued;
  repaired.promoted += s.tasks_promoted;
  repaired.settled += s.jobs_settled;
  repaired.timedOut += s.tasks_timed_out;
}

function changedNothing(s: SweepSummary): boolean {
  const { dispatch, skipped, ...counts } = s;
  return (
    dispatch.length === 0 && skipped.length === 0 && Object.values(counts).every((n) => n === 0)
  );
}

function outputsFor(task: ClaimedTask, rng: Random | null): Record<string, string> {
  const names = [...task.outputs];
  // Sometimes a runner forgets one: its dependents must fail at promotion.
  if (rng && names.length > 0 && rng.chance(0.1)) names.splice(rng.int(0, names.length - 1), 1);
  return Object.fromEntries(names.map((n) => [n, `${n}-${task.attempt}`]));
}

type Answer = CompletionResult | 'conflict' | 'error';

/** Completes, counting a stale-lease 409 as expected after checking it really is stale. */
async function complete(c: Completion, what: string): Promise<Answer> {
  try {
    const result = await completeTask(pool, c);
    stats.completions++;
    if (result.job_state) reports.set(result.job_id, (reports.get(result.job_id) ?? 0) + 1);
    return result;
  } catch (err) {
    if (!isStaleLease(err)) {
      noteUnexpected(what, err);
      return 'error';
    }
    stats.conflicts++;
    const { rows } = await pool.query('select state, lease_id from tasks where id = $1', [
      c.taskId,
    ]);
    if (rows[0]?.state === 'running' && rows[0]?.lease_id === c.leaseId) {
      unexpected.push(`${what}: 409 although the task is running under this lease`);
    }
    return 'conflict';
  }
}

// A repeat answers the same state. It reports the job's end only when its own
// follow-up is the one that settled the job (#35: a sibling's follow-up may
// run at the same time, and exactly one of them moves the job), so never
// when the first answer already reported it.
function sameAnswer(a: Answer, b: Answer): boolean {
  if (typeof a === 'string' || typeof b === 'string') return a === b;
  return (
    a.state === b.state && a.job_id === b.job_id && (b.job_state === null || a.job_state === null)
  );
}

/** How many completions reported each job's end: the commit status is posted on that report. */
const reports = new Map<string, number>();

let stop = false;
let deadline = Number.POSITIVE_INFINITY;
const finishedRunning = () => stop || Date.now() > deadline || stats.claims >= MAX_CLAIMS;

async function runner(worker: string, rng: Random): Promise<void> {
  while (!finishedRunning()) {
    let task: ClaimedTask | null;
    const leaseS = rng.pick([1, 2]);
    try {
      task = await claimTask(pool, worker, [], { leaseS });
    } catch (err) {
      noteUnexpected('claim', err);
      continue;
    }
    if (!task) {
      stats.emptyClaims++;
      await sleep(rng.int(5, 40));
      continue;
    }
    stats.claims++;
    const base = { workerId: worker, taskId: task.id, leaseId: task.lease_id! };
    await sleep(rng.int(0, 40)); // the script runs
    const r = rng.next();
    if (r < 0.42) {
      await complete(
        { ...base, outcome: 'success', exitCode: 0, outputs: outputsFor(task, rng) },
        'complete success',
      );
    } else if (r < 0.45) {
      await complete({ ...base, outcome: 'failed', exitCode: 1 }, 'complete failed');
    } else if (r < 0.56) {
      await complete(
        { ...base, outcome: 'failed', transient: true, error: 'clone failed' },
        'complete transient',
      );
    } else if (r < 0.63) {
      stats.vanished++; // never heard from again: the lease expires
    } else if (r < 0.82) {
      let cancel = false;
      try {
        const hb = await heartbeat(pool, worker, task.id, task.lease_id!, { leaseS: 2 });
        stats.heartbeats++;
        cancel = hb.cancel;
      } catch (err) {
        if (isStaleLease(err)) stats.conflicts++;
        else noteUnexpected('heartbeat', err);
      }
      await complete(
        cancel
          ? { ...base, outcome: 'cancelled', error: 'stopped on request' }
          : { ...base, outcome: 'success', exitCode: 0, outputs: outputsFor(task, null) },
        'complete after heartbeat',
      );
    } else if (r < 0.96) {
      const c: Completion = rng.chance(0.75)
        ? { ...base, outcome: 'success', exitCode: 0, outputs: outputsFor(task, null) }
        : { ...base, outcome: 'failed', exitCode: 2, transient: rng.chance(0.8) };
      const first = await complete(c, 'complete (first of two)');
      const second = await complete(c, 'complete (repeat)');
      stats.repeats++;
      if (!sameAnswer(first, second)) {
        unexpected.push(
          `a repeated completion answered differently: ${JSON.stringify(first)} then ${JSON.stringify(second)}`,
        );
      }
    } else {
      // Too slow: the lease runs out before the runner reports.
      await sleep(leaseS * 1_000 + 300);
      await complete({ ...base, outcome: 'success', outputs: outputsFor(task, null) }, 'late');
    }
  }
}

// During the storm the sweepers only look: a sweep that repaired would hide a
// promotion or a settle the completions lost, which the check at rest must
// see. What they would have repaired is tallied and printed.
const wouldRepair = { leases: 0, timedOut: 0, followUps: 0, orphans: 0, compiles: 0 };

async function sweeper(rng: Random): Promise<void> {
  while (!finishedRunning()) {
    try {
      const s = await sweep(pool, { dryRun: true });
      stats.sweeps++;
      wouldRepair.leases += s.leases_expired;
      wouldRepair.timedOut += s.tasks_timed_out;
      wouldRepair.followUps += s.jobs_settled;
      wouldRepair.orphans += s.tasks_cancelled;
      wouldRepair.compiles += s.compiles_redispatched;
    } catch (err) {
      noteUnexpected('sweep', err);
    }
    await sleep(rng.int(20, 120));
  }
}

async function canceller(rng: Random): Promise<void> {
  while (!finishedRunning()) {
    await sleep(rng.int(300, 900));
    if (finishedRunning()) break;
    const reason = `cancelled by the soak (#${stats.cancels + 1})`;
    try {
      const { rows } = await pool.query<{ id: string }>(
        `select id from jobs where state = 'running' order by number`,
      );
      if (rows.length === 0) continue;
      stats.cancels++;
      const job = await cancelJob(pool, rng.pick(rows).id, reason);
      if (job.error === reason) stats.cancelled++;
    } catch (err) {
      noteUnexpected('cancel', err);
    }
  }
}

async function creator(rng: Random, project: string, jobs: string[]): Promise<void> {
  while (!finishedRunning() && stats.lateJobs < LATE_JOBS) {
    await sleep(rng.int(50, 250));
    try {
      jobs.push((await startedJob(pool, project, randomDag(rng))).id);
      stats.lateJobs++;
    } catch (err) {
      noteUnexpected('start a job', err);
    }
  }
}

/** Ends the run early once every job has finished and no more are coming. */
async function monitor(): Promise<void> {
  while (!finishedRunning()) {
    await sleep(200);
    if (stats.lateJobs < LATE_JOBS) continue;
    const { rows } = await pool.query(
      `select count(*)::int as n from jobs where state in ('pending', 'running')`,
    );
    if (rows[0].n === 0) stop = true;
  }
}

/** Rows that break an invariant; the message names it. */
async function violations(sql: string): Promise<unknown[]> {
  return (await pool.query(sql)).rows;
}

test('a randomized soak of runners, sweepers and cancels keeps every scheduler invariant', {
  timeout: 120_000,
}, async () => {
  const rng = new Random(seed);
  const project = await makeProject(pool);
  const workers: string[] = [];
  for (let i = 0; i < RUNNERS; i++) workers.push(await makeWorker(pool));
  const jobs: string[] = [];
  for (let i = 0; i < INITIAL_JOBS; i++) {
    jobs.push((await startedJob(pool, project, randomDag(rng))).id);
  }

  deadline = Date.now() + RUN_MS;
  await Promise.all([
    ...workers.map((w, i) => runner(w, new Random(seed ^ Math.imul(i + 1, 0x9e3779b1)))),
    ...Array.from({ length: SWEEPERS }, (_, i) => sweeper(new Random(seed + 1_000 + i))),
    canceller(new Random(seed + 2_000)),
    creator(new Random(seed + 3_000), project, jobs),
    monitor(),
  ]);
  stop = true;

  // Traffic has stopped and every follow-up has run: none may have stranded a
  // ready child or a finished job (the sweep is the repair for crashes, and
  // nothing crashed here).
  const strandedAtRest = await violations(
    `select w.id, w.name from tasks w join jobs j on j.id = w.job_id
      where j.state = 'running' and w.state = 'waiting'
        and not exists (select 1 from task_needs n join tasks p on p.id = n.need_id
                         where n.task_id = w.id and p.state in ('waiting', 'queued', 'running'))
     union all
     select j.id, null from jobs j
      where j.state = 'running'
        and not exists (select 1 from tasks t
                         where t.job_id = j.id and t.state in ('waiting', 'queued', 'running'))`,
  );

  assert.deepEqual(repaired, { leases: 0, requeued: 0, promoted: 0, settled: 0, timedOut: 0 });

  // Every runner is gone: their leases run out, and the sweep repairs until
  // a pass changes nothing. Its first pass expires exactly the leases of the
  // tasks left running (vanished and late runners, and ones that never
  // reported), and nothing it does after that is a promotion or a settle the
  // completions lost: those were checked above.
  const { rowCount: runningAtRest } = await pool.query(
    `update tasks set lease_expires_at = now() - interval '1 second' where state = 'running'`,
  );
  const firstRepair = await sweep(pool);
  addSweep(firstRepair);
  assert.equal(
    firstRepair.leases_expired,
    runningAtRest,
    'the first pass expires every lease left',
  );
  assert.equal(firstRepair.errors, 0);
  let quiet = changedNothing(firstRepair);
  for (let i = 0; i < 20 && !quiet; i++) {
    const s = await sweep(pool);
    addSweep(s);
    quiet = changedNothing(s);
  }
  assert.ok(quiet, 'the sweep reaches a pass that changes nothing');

  // Drain: one well-behaved runner finishes whatever is left.
  const drainer = workers[0]!;
  let running = -1;
  for (let round = 0; round < 5_000; round++) {
    const task = await claimTask(pool, drainer, [], { leaseS: 60 });
    if (task) {
      await completeTask(pool, {
        workerId: drainer,
        taskId: task.id,
        leaseId: task.lease_id!,
        outcome: 'success',
        exitCode: 0,
        outputs: outputsFor(task, null),
      });
      continue;
    }
    const s = await sweep(pool);
    addSweep(s);
    const { rows } = await pool.query(
      `select count(*)::int as n from jobs where state = 'running'`,
    );
    running = rows[0].n;
    if (running === 0 || changedNothing(s)) break;
  }

  const states = await pool.query<{ state: string; n: number }>(
    `select state, count(*)::int as n from jobs group by state order by state`,
  );
  console.log(
    `soak: ${stats.claims} claims, ${stats.completions} completions, ${stats.vanished} vanished, ` +
      `${stats.conflicts} 409s, ${stats.sweeps} sweeps, ${stats.cancels} cancels ` +
      `(${stats.cancelled} took effect); ${stats.repeats} repeated completions, ` +
      `${stats.heartbeats} heartbeats, ${stats.emptyClaims} empty claims; sweeps repaired ` +
      `${repaired.leases} leases (${repaired.requeued} requeued), ${repaired.promoted} promotions, ` +
      `${repaired.settled} settles after the storm; during it the sweepers would have repaired ` +
      `${JSON.stringify(wouldRepair)}; ${jobs.length} jobs: ` +
      states.rows.map((r) => `${r.n} ${r.state}`).join(', '),
  );
  for (const line of unexpected.slice(0, 20)) console.log(`unexpected: ${line}`);

  assert.deepEqual(unexpected, [], 'every operation succeeded or met an expected stale-lease 409');
  assert.deepEqual(
    [...reports].filter(([, n]) => n > 1),
    [],
    "no job's end was reported by two completions",
  );
  assert.deepEqual(strandedAtRest, [], 'when traffic stopped, no promotion or settle was lost');
  assert.equal(running, 0, 'the drain finished every job: no job is stuck running');

  assert.deepEqual(
    await violations(
      `select j.id from jobs j
        where j.state = 'running'
          and not exists (select 1 from tasks t
                           where t.job_id = j.id and t.state in ('waiting', 'queued', 'running'))`,
    ),
    [],
    'no running job has nothing left to do',
  );
  assert.deepEqual(
    await violations(
      `select id, lease_expires_at from tasks
        where state = 'running' and not (lease_expires_at > now())`,
    ),
    [],
    'no running task is without a live lease',
  );
  assert.deepEqual(
    await violations(`select id, name from tasks where state = 'running'`),
    [],
    'after the drain no task is running',
  );
  assert.deepEqual(
    await violations(
      `select w.id, w.name from tasks w join jobs j on j.id = w.job_id
        where j.state = 'running' and w.state = 'waiting'
          and not exists (select 1 from task_needs n join tasks p on p.id = n.need_id
                           where n.task_id = w.id and p.state in ('waiting', 'queued', 'running'))`,
    ),
    [],
    'no waiting task of a running job has all its needs finished',
  );
  assert.deepEqual(
    await violations(
      `select j.id, j.state as job, t.name, t.state from jobs j join tasks t on t.job_id = j.id
        where j.state in ('success', 'failed', 'cancelled')
          and t.state in ('waiting', 'queued', 'running')`,
    ),
    [],
    'a finished job (cancelled included) has no waiting, queued or running task',
  );
  assert.deepEqual(
    await violations(
      `select j.id, t.name, t.state from jobs j join tasks t on t.job_id = j.id
        where j.state = 'success' and t.state in ('failed', 'cancelled') and not t.allow_failure`,
    ),
    [],
    'a successful job has no failed or cancelled task that was not allowed to fail',
  );
  assert.deepEqual(
    await violations(
      `select j.id from jobs j
        where j.state = 'failed' and j.started_at is not null
          and not exists (select 1 from tasks t
                           where t.job_id = j.id and t.state in ('failed', 'cancelled')
                             and not t.allow_failure)`,
    ),
    [],
    'a failed job has a failed or cancelled task that was not allowed to fail',
  );
  assert.deepEqual(
    await violations(`select id, attempt, max_attempts from tasks where attempt > max_attempts`),
    [],
    'no task went past its maximum attempts',
  );
  assert.deepEqual(
    await violations(
      `select t.id, t.attempt, count(a.attempt)::int as rows
         from tasks t left join task_attempts a on a.task_id = t.id
        group by t.id having count(a.attempt) <> t.attempt`,
    ),
    [],
    'each task has one attempt row per attempt',
  );
  assert.deepEqual(
    await violations(
      `select task_id, attempt from task_attempts where finished_at is null or outcome is null`,
    ),
    [],
    'every attempt has ended with an outcome',
  );
  assert.deepEqual(
    await violations(
      `select t.id, t.name, p.name as need, p.state as need_state
         from tasks t join task_needs n on n.task_id = t.id join tasks p on p.id = n.need_id
        where t.attempt > 0
          and (not (p.state = 'success' or (p.state = 'failed' and p.allow_failure))
               or exists (select 1 from unnest(p.outputs) as o (name)
                           where not exists (select 1 from task_outputs x
                                              where x.task_id = p.id and x.name = o.name)))`,
    ),
    [],
    'no task ran before its needs finished well and gave their declared outputs',
  );
  assert.deepEqual(
    await violations(`select id, name from tasks where state = 'skipped' and attempt > 0`),
    [],
    'a skipped task never ran',
  );
  assert.deepEqual(
    await violations(
      `select t.id, a.outcome, a.result_state
         from tasks t join task_attempts a on a.task_id = t.id and a.attempt = t.attempt
        where t.state = 'success' and (a.outcome <> 'success' or a.result_state <> 'success')`,
    ),
    [],
    "a successful task's last attempt is the one that succeeded",
  );
});
