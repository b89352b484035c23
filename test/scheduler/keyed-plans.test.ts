// Issue #36: the task cycle reads by key whatever the tables' statistics say.
//
// A new database has statistics that call task_attempts and tasks empty
// (migration 019 analyses both). PL/pgSQL keeps a session's plans for as
// long as the connection lives, so a plan chosen while a table was small
// stays after the table has grown: before this test, every success updated
// its attempt through a sequential scan of all of task_attempts, and the
// cycle's cost grew with the history (found in the bench's per-table
// counters). Here one connection runs many claims (with an Idempotency-Key,
// as the runner sends) and successes on a fresh database with autovacuum
// held off, so the statistics stay those of the empty tables, and no table
// may have been scanned.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createPool, migrate } from '../../lib/db/index.ts';
import { claimTask, completeTask } from '../../lib/scheduler/index.ts';
import { testDatabase } from '../helpers/db.ts';
import { jobState, makeProject, makeWorker, startedJob } from '../helpers/fixtures.ts';
import { laneSpec, newLane } from '../helpers/race.ts';

// One connection for the migrations, the set-up and the statistics' reads,
// one for the cycles: a backend's counters reach the server when it goes
// idle after pg_stat_force_next_flush() (PostgreSQL 15 on), before its reply,
// so each is flushed before a reading and no late flush of another lands in
// the window.
const db = await testDatabase(import.meta.filename, { migrate: false, poolMax: 1 });

const TABLES = ['tasks', 'task_attempts', 'jobs', 'projects', 'workers', 'task_needs'];

/** Sequential scans of each of TABLES so far, as the server's statistics hold them. */
async function seqScans(): Promise<Record<string, number>> {
  const { rows } = await db.pool.query<{ relname: string; seq_scan: number }>(
    'select relname, seq_scan from pg_stat_user_tables where relname = any ($1)',
    [TABLES],
  );
  return Object.fromEntries(rows.map((r) => [r.relname, r.seq_scan]));
}

test('claims and successes scan no table on a database whose statistics say empty', async () => {
  await migrate(db.pool);
  // The statistics stay those migration 019 gathered on the empty tables.
  for (const table of ['tasks', 'task_attempts', 'jobs']) {
    await db.pool.query(`alter table ${table} set (autovacuum_enabled = off)`);
  }
  const { rows: stats } = await db.pool.query<{ reltuples: number }>(
    `select reltuples from pg_class where relname = 'task_attempts'`,
  );
  assert.equal(stats[0]!.reltuples, 0, 'precondition: task_attempts analysed while empty');

  const lane = newLane();
  const project = await makeProject(db.pool);
  const worker = await makeWorker(db.pool, [lane]);
  const n = 120;
  const job = await startedJob(
    db.pool,
    project,
    Array.from({ length: n }, (_, i) => laneSpec(lane, `t${i}`)),
  );

  // One connection: its plans are made early, while the tables are small,
  // and kept for every later call.
  const cycles = createPool({ url: db.url, max: 1 });
  try {
    // A first round makes the plans (a generic plan comes after five calls).
    const cycle = async (i: number) => {
      const task = await claimTask(cycles, worker, [lane], { key: `k${i}` });
      assert.ok(task, `claim ${i} found a task`);
      const done = await completeTask(cycles, {
        workerId: worker,
        taskId: task.id,
        leaseId: task.lease_id!,
        outcome: 'success',
      });
      assert.equal(done.state, 'success');
    };
    for (let i = 0; i < 20; i++) await cycle(i);
    await db.pool.query('select pg_stat_force_next_flush()');
    await cycles.query('select pg_stat_force_next_flush()');
    const before = await seqScans();
    for (let i = 20; i < n; i++) await cycle(i);
    await cycles.query('select pg_stat_force_next_flush()');
    const after = await seqScans();
    const scanned = TABLES.filter((t) => (after[t] ?? 0) !== (before[t] ?? 0)).map(
      (t) => `${t}: ${(after[t] ?? 0) - (before[t] ?? 0)}`,
    );
    assert.deepEqual(scanned, [], `sequential scans over ${n - 20} cycles`);
  } finally {
    await cycles.end();
  }
  assert.equal(await jobState(db.pool, job.id), 'success');
});
