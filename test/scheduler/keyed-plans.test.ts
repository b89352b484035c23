// Issue #36: the task cycle reads by key whatever the tables' statistics say.
//
// A table analysed while empty is taken by the planner for as small as it
// is, and PL/pgSQL keeps a session's plans for as long as the connection
// lives: a plan chosen while the table was small stays after it has grown.
// Migration 019 used to leave every new database that way (it analysed
// tasks and task_attempts when empty; test/e2e/runner-plans.test.ts covers
// a new database as it is now), and an analyse of an empty table by hand or
// by autovacuum still does. Before this test every success updated its
// attempt through a sequential scan of all of task_attempts, and the cycle's
// cost grew with the history (found in the bench's per-table counters).
// Here one connection runs many claims (with an Idempotency-Key, as the
// runner sends) and successes after both tables were analysed empty, with
// autovacuum held off so the statistics stay so, and no table may have been
// scanned.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createPool, migrate } from '../../lib/db/index.ts';
import { claimTask, completeTask } from '../../lib/scheduler/index.ts';
import { scansDuring, testDatabase } from '../helpers/db.ts';
import { jobState, makeProject, makeWorker, startedJob } from '../helpers/fixtures.ts';
import { laneSpec, newLane } from '../helpers/race.ts';

// One connection for the migrations, the set-up and the statistics' reads,
// one for the cycles: a backend's counters reach the server when it goes
// idle after pg_stat_force_next_flush() (PostgreSQL 15 on), before its reply,
// so each is flushed before a reading and no late flush of another lands in
// the window.
const db = await testDatabase(import.meta.filename, { migrate: false, poolMax: 1 });

const TABLES = ['tasks', 'task_attempts', 'jobs', 'projects', 'workers', 'task_needs'];

test('claims and successes scan no table on a database whose statistics say empty', async () => {
  await migrate(db.pool);
  // Analysed empty, and kept so.
  for (const table of ['tasks', 'task_attempts', 'jobs']) {
    await db.pool.query(`alter table ${table} set (autovacuum_enabled = off)`);
  }
  await db.pool.query('analyze tasks, task_attempts');
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
    const scanned = await scansDuring([db.pool, cycles], TABLES, async () => {
      for (let i = 20; i < n; i++) await cycle(i);
    });
    assert.deepEqual(scanned, [], `sequential scans over ${n - 20} cycles`);
  } finally {
    await cycles.end();
  }
  assert.equal(await jobState(db.pool, job.id), 'success');
});
