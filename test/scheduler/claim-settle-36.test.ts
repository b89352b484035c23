// Issue #36: claimers and settles that do not collide under REPEATABLE READ.
// Each order is forced on purpose: a connection of the test opens a
// REPEATABLE READ transaction and takes its snapshot (or its lock) first, the
// other side acts and commits (or rolls back), then the first goes on. No
// assertion depends on who won a race.
//
// The claim's walk (migrations/functions/conductor_claim.sql) locks the
// oldest queued task that no transaction concurrent with its snapshot
// touched; the touched ones it passed over are tried only after. The settle (conductor_settle.sql) checks
// "nothing left" first, then tries an advisory lock keyed on the job, and a
// settle that finds it held answers null at once.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';
import pg from 'pg';
import { claimTask, settleJobAfterCommit, sweep } from '../../lib/scheduler/index.ts';
import { testDatabase } from '../helpers/db.ts';
import { makeWorker, startedJob } from '../helpers/fixtures.ts';
import { forgeProject, laneSpec, newLane } from '../helpers/race.ts';

const db = await testDatabase(import.meta.filename, { poolMax: 6 });
const { pool } = db;

/** A connection of its own, for a transaction the test keeps open. */
async function connection(): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  return client;
}

/** Opens a REPEATABLE READ transaction on `c` and takes its snapshot now. */
async function snapshotNow(c: pg.Client): Promise<void> {
  await c.query('begin isolation level repeatable read');
  await c.query('select 1 from jobs limit 1');
}

async function claimIn(c: pg.Client, worker: string, lane: string): Promise<string | null> {
  const { rows } = await c.query<{ name: string }>(
    `select (c.task).name from conductor_claim($1, $2::text[], 60, $3, null) c`,
    [worker, [lane], randomUUID()],
  );
  return rows[0]?.name ?? null;
}

async function settleIn(c: pg.Client, jobId: string): Promise<string | null> {
  const { rows } = await c.query<{ s: string | null }>('select conductor_settle($1) as s', [jobId]);
  return rows[0]!.s;
}

/** A job of `names` in a lane of its own, and a worker of that lane. */
async function laneJob(names: string[]) {
  const lane = newLane();
  const project = await forgeProject(pool);
  const worker = await makeWorker(pool, [lane]);
  const job = await startedJob(
    pool,
    project,
    names.map((n) => laneSpec(lane, n)),
  );
  return { lane, worker, jobId: job.id };
}

/** Finishes the named tasks of a job directly (no follow-up runs). */
async function finish(jobId: string, names: string[]): Promise<void> {
  await pool.query(
    `update tasks set state = 'success', finished_at = now() where job_id = $1 and name = any($2)`,
    [jobId, names],
  );
}

async function jobOutcome(jobId: string) {
  const { rows } = await pool.query<{ state: string; outbox: number }>(
    `select j.state,
            (select count(*)::int from status_outbox o
              where o.job_id = j.id and o.state <> 'pending') as outbox
       from jobs j where j.id = $1`,
    [jobId],
  );
  return rows[0]!;
}

async function advisoryLocksOf(c: pg.Client): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    `select count(*)::int as n from pg_locks
      where locktype = 'advisory' and pid = $1`,
    [(c as unknown as { processID: number }).processID],
  );
  return rows[0]!.n;
}

test('a head task claimed and committed after the snapshot is passed over, without 40001', async () => {
  const { lane, worker } = await laneJob(['one', 'two', 'three']);
  const a = await connection();
  try {
    await snapshotNow(a);
    // Another claimer takes the head and commits after A's snapshot: A still
    // sees it queued; the walk before #36 locked it and raised 40001.
    const other = await claimTask(pool, await makeWorker(pool, [lane]), [lane], { retries: 0 });
    assert.equal(other?.name, 'one');
    assert.equal(await claimIn(a, worker, lane), 'two');
    await a.query('commit');
  } finally {
    await a.end();
  }
  const { rows } = await pool.query(
    `select name, state from tasks where labels = $1::text[] order by position`,
    [[lane]],
  );
  assert.deepEqual(
    rows.map((r) => [r.name, r.state]),
    [
      ['one', 'running'],
      ['two', 'running'],
      ['three', 'queued'],
    ],
  );
});

test('a task whose xmax is a claim that rolled back is claimed first, in order', async () => {
  const { lane, worker } = await laneJob(['one', 'two']);
  const a = await connection();
  try {
    await a.query('begin isolation level repeatable read');
    assert.equal(await claimIn(a, worker, lane), 'one');
    await a.query('rollback');
  } finally {
    await a.end();
  }
  // 'one' carries the aborted claim's xid as xmax; 'two' carries none. Had the
  // walk passed over 'one', it would have answered 'two'.
  const { rows } = await pool.query<{ touched: boolean }>(
    `select xmax <> 0 as touched from tasks where labels = $1::text[] and name = 'one'`,
    [[lane]],
  );
  assert.equal(rows[0]!.touched, true);
  assert.equal((await claimTask(pool, worker, [lane], { retries: 0 }))?.name, 'one');
  assert.equal((await claimTask(pool, worker, [lane], { retries: 0 }))?.name, 'two');
});

for (const end of ['rollback', 'commit'] as const) {
  test(`a task only locked by a transaction that ended (${end}) after the snapshot is still claimed`, async () => {
    const { lane, worker } = await laneJob(['only']);
    const a = await connection();
    const locker = await connection();
    try {
      await snapshotNow(a);
      await locker.query('begin');
      await locker.query(`select id from tasks where labels = $1::text[] for update`, [[lane]]);
      await locker.query(end);
      // The locker's xid is newer than A's snapshot: the walk passes over
      // the row, then takes it as nothing untouched is left (a lock alone
      // raises no 40001).
      assert.equal(await claimIn(a, worker, lane), 'only');
      await a.query('commit');
    } finally {
      await a.end();
      await locker.end();
    }
  });
}

/** Two transactions share-lock the lane's task `name` at once, then commit: its xmax is a multixact. */
async function multixactOn(lane: string, name: string): Promise<void> {
  const l1 = await connection();
  const l2 = await connection();
  try {
    for (const l of [l1, l2]) {
      await l.query('begin');
      await l.query(`select id from tasks where labels = $1::text[] and name = $2 for share`, [
        [lane],
        name,
      ]);
    }
    await l1.query('commit');
    await l2.query('commit');
  } finally {
    await l1.end();
    await l2.end();
  }
}

test('a task whose xmax is a multixact (two share lockers) is still claimed', async () => {
  const { lane, worker } = await laneJob(['only']);
  await multixactOn(lane, 'only');
  assert.equal((await claimTask(pool, worker, [lane], { retries: 0 }))?.name, 'only');
});

test('a free older task that a lock released after the snapshot passed over: that claim takes the younger, the next the older', async () => {
  const { lane, worker } = await laneJob(['one', 'two']);
  const a = await connection();
  const locker = await connection();
  try {
    await snapshotNow(a);
    await locker.query('begin');
    await locker.query(
      `select id from tasks where labels = $1::text[] and name = 'one' for update`,
      [[lane]],
    );
    await locker.query('rollback');
    // 'one' is free, but its xmax is a transaction A's snapshot saw neither
    // ended nor begun: A's walk locks 'two' before it (docs/scheduling.md,
    // the one exception to oldest-first).
    assert.equal(await claimIn(a, worker, lane), 'two');
    await a.query('commit');
  } finally {
    await a.end();
    await locker.end();
  }
  // A claim whose snapshot follows the locker's end takes 'one'.
  assert.equal((await claimTask(pool, worker, [lane], { retries: 0 }))?.name, 'one');
});

test('an older task whose xmax is a multixact is claimed before a younger one', async () => {
  const { lane, worker } = await laneJob(['one', 'two']);
  await multixactOn(lane, 'one');
  const { rows } = await pool.query<{ xmax: string }>(
    `select xmax::text from tasks where labels = $1::text[] and name = 'one'`,
    [[lane]],
  );
  assert.notEqual(rows[0]!.xmax, '0');
  assert.equal((await claimTask(pool, worker, [lane], { retries: 0 }))?.name, 'one');
  assert.equal((await claimTask(pool, worker, [lane], { retries: 0 }))?.name, 'two');
});

test('the walk locks a row at once unless its xmax can be a transaction concurrent with the snapshot', async () => {
  // conductor_claim_fresh on synthetic values around the server's xid
  // counter: a multixact id is not an xid, so the xmax can read as any
  // number. Only an xid the snapshot saw running, or one at or above the
  // snapshot's xmax that the xid counter has reached, is passed over. Before
  // the review of #36 every xmax not visible in the snapshot was, which kept a
  // task whose multixact id ran ahead of the xid counter behind younger ones
  // while younger work kept arriving; until #47 every number within 65,536
  // above the snapshot's xmax was, which kept it there until the counter
  // passed it (test/scheduler/claim-multixact.test.ts has a real one).
  const c = await pool.connect();
  try {
    // One transaction: the server reads its counter for age() once in it.
    await c.query('begin');
    const { rows } = await c.query<{ counter: string }>(
      `select pg_snapshot_xmax(pg_current_snapshot())::text as counter`,
    );
    const counter = BigInt(rows[0]!.counter);
    // A snapshot taken 100 xids ago, when one transaction was running.
    const next = counter - 100n;
    const snap = `${next - 10n}:${next}:${next - 5n}`; // xmin:xmax:xip
    const low = (x: bigint) => (x % 4294967296n).toString();
    const fresh = async (xmax: string): Promise<boolean> => {
      const { rows } = await c.query<{ f: boolean }>(
        `select conductor_claim_fresh($1::xid, $2::pg_snapshot, $3::bigint) as f`,
        [xmax, snap, next.toString()],
      );
      return rows[0]!.f;
    };
    assert.equal(await fresh('0'), true, 'untouched');
    assert.equal(await fresh(low(next - 8n)), true, 'ended before the snapshot');
    assert.equal(await fresh(low(next - 5n)), false, 'running at the snapshot');
    assert.equal(await fresh(low(next)), false, "the first xid at the snapshot's xmax");
    assert.equal(await fresh(low(counter - 1n)), false, 'assigned after the snapshot');
    assert.equal(
      await fresh(low(counter + 30_000n)),
      true,
      'ahead of the xid counter, within 65,536 of the snapshot: a multixact id',
    );
    assert.equal(await fresh(low(counter + 2_000_000_000n)), true, 'far ahead: a multixact id');
    // Early in a cluster's life, an id that would name an xid before the first.
    const early = await c.query<{ f: boolean }>(
      `select conductor_claim_fresh('4000000000'::xid, '900:1000:'::pg_snapshot, 1000) as f`,
    );
    assert.equal(early.rows[0]!.f, true);
  } finally {
    await c.query('rollback');
    c.release();
  }
});

test('the claim inlines conductor_claim_fresh (no function call per row)', async () => {
  const { rows } = await pool.query<{ plan: string }>(
    `explain (verbose, costs off)
       select t.id from tasks t
        where conductor_claim_fresh(t.xmax, pg_current_snapshot(), 1000)`,
  );
  const plan = rows.map((r) => Object.values(r)[0]).join('\n');
  assert.doesNotMatch(plan, /conductor_claim_fresh/);
  assert.match(plan, /pg_visible_in_snapshot/);
});

test('claims keep oldest job first, then position', async () => {
  const lane = newLane();
  const project = await forgeProject(pool);
  const worker = await makeWorker(pool, [lane]);
  await startedJob(pool, project, [laneSpec(lane, 'j1-a'), laneSpec(lane, 'j1-b')]);
  await startedJob(pool, project, [laneSpec(lane, 'j2-a')]);
  // Touch the oldest job's head by a claim that rolled back.
  const a = await connection();
  try {
    await a.query('begin');
    assert.equal(await claimIn(a, worker, lane), 'j1-a');
    await a.query('rollback');
  } finally {
    await a.end();
  }
  const got: string[] = [];
  for (let i = 0; i < 3; i++) {
    got.push((await claimTask(pool, worker, [lane], { retries: 0 }))?.name ?? '-');
  }
  assert.deepEqual(got, ['j1-a', 'j1-b', 'j2-a']);
});

test('an empty claim takes no transaction id (writes nothing)', async () => {
  const { lane, worker } = await laneJob(['only']);
  const a = await connection();
  try {
    await a.query('begin isolation level repeatable read');
    assert.equal(await claimIn(a, worker, `${lane}-none`), null);
    const { rows } = await a.query('select pg_current_xact_id_if_assigned() as x');
    assert.equal(rows[0].x, null);
    // One walk of the claim index (the first version of #36 made two).
    const scans = await a.query<{ n: string }>(
      "select pg_stat_get_xact_numscans('tasks_claimable'::regclass)::text as n",
    );
    assert.equal(scans.rows[0]!.n, '1');
    await a.query('commit');
  } finally {
    await a.end();
  }
});

test('settle: B finds A holding the settle and answers null at once; A commits: settled once', async () => {
  const { jobId } = await laneJob(['a', 'b']);
  await finish(jobId, ['a', 'b']);
  const a = await connection();
  try {
    await a.query('begin isolation level repeatable read');
    assert.equal(await settleIn(a, jobId), 'success');
    // B, in its own statement: with A's lock held it must not wait on the job
    // row (it would have, then failed with 40001). lock_timeout makes a wait
    // an error here instead of a hang.
    const b = await connection();
    try {
      await b.query(`set lock_timeout = '2s'`);
      assert.equal(await settleIn(b, jobId), null);
    } finally {
      await b.end();
    }
    await a.query('commit');
  } finally {
    await a.end();
  }
  assert.deepEqual(await jobOutcome(jobId), { state: 'success', outbox: 1 });
  assert.equal(await settleJobAfterCommit(pool, jobId), null);
});

test('settle: A rolls back after B answered null: the sweep settles the job', async () => {
  const { jobId } = await laneJob(['a']);
  await finish(jobId, ['a']);
  const a = await connection();
  try {
    await a.query('begin isolation level repeatable read');
    assert.equal(await settleIn(a, jobId), 'success');
    assert.equal(await settleJobAfterCommit(pool, jobId), null);
    await a.query('rollback');
  } finally {
    await a.end();
  }
  assert.deepEqual(await jobOutcome(jobId), { state: 'running', outbox: 0 });
  await sweep(pool);
  assert.deepEqual(await jobOutcome(jobId), { state: 'success', outbox: 1 });
});

test('settle: B committed before A started: A answers null', async () => {
  const { jobId } = await laneJob(['a']);
  await finish(jobId, ['a']);
  assert.equal(await settleJobAfterCommit(pool, jobId), 'success');
  assert.equal(await settleJobAfterCommit(pool, jobId), null);
  assert.deepEqual(await jobOutcome(jobId), { state: 'success', outbox: 1 });
});

test('settle: B committed between A snapshot and A lock: 40001 for A, and its retry answers null', async () => {
  const { jobId } = await laneJob(['a']);
  await finish(jobId, ['a']);
  const a = await connection();
  try {
    await snapshotNow(a);
    assert.equal(await settleJobAfterCommit(pool, jobId), 'success');
    await assert.rejects(settleIn(a, jobId), { code: '40001' });
    await a.query('rollback');
    assert.equal(await settleIn(a, jobId), null);
  } finally {
    await a.end();
  }
  assert.deepEqual(await jobOutcome(jobId), { state: 'success', outbox: 1 });
});

test('settle: A whose snapshot still sees a sibling running takes no lock, so B settles', async () => {
  const { jobId } = await laneJob(['a', 'b']);
  await finish(jobId, ['a']);
  const a = await connection();
  try {
    await snapshotNow(a);
    await finish(jobId, ['b']);
    // A first, its transaction left open: nothing left? not in its snapshot.
    assert.equal(await settleIn(a, jobId), null);
    assert.equal(await advisoryLocksOf(a), 0);
    // B after it, while A is still open: not skipped.
    assert.equal(await settleJobAfterCommit(pool, jobId), 'success');
    await a.query('commit');
  } finally {
    await a.end();
  }
  assert.deepEqual(await jobOutcome(jobId), { state: 'success', outbox: 1 });
});
