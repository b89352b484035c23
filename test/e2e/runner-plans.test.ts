// Issue #36: a runner's calls read by key whatever the tables' statistics say.
//
// test/scheduler/keyed-plans.test.ts holds the library's claim and success
// to this; here the routes a runner calls (claim with an Idempotency-Key,
// heartbeat, a log chunk, the completion), through the local stack with a
// pool of one connection, so every plan is made while the tables are small
// and kept. Autovacuum is held off. Twice, in order: on a new database as
// the migrations leave it (migration 019 used to analyse its empty tables),
// then with every job removed and the emptied tables analysed (by hand, or
// by autovacuum after a purge), when the planner takes them for as small as
// they are.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { scansDuring } from '../helpers/db.ts';
import { makeProject, startedJob } from '../helpers/fixtures.ts';
import { laneSpec, newLane } from '../helpers/race.ts';
import { testStack } from '../helpers/stack.ts';

const stack = await testStack(import.meta.filename, { CONDUCTOR_DB_POOL_MAX: '1' });
const { pool } = stack.context;

const TABLES = [
  'tasks',
  'task_attempts',
  'jobs',
  'projects',
  'workers',
  'task_needs',
  'log_chunks',
  'project_secrets',
];

/**
 * A runner's cycles over a new job; answers the tables that were scanned
 * after the first 20. With `analyseEmpty`, every job is removed first and
 * the emptied task tables analysed (which also makes the connection plan
 * again).
 */
async function runnerCycles(analyseEmpty: boolean): Promise<string[]> {
  for (const table of ['tasks', 'task_attempts', 'jobs', 'log_chunks']) {
    await pool.query(`alter table ${table} set (autovacuum_enabled = off)`);
  }
  if (analyseEmpty) {
    // The tables every cycle reads; `jobs` is left never analysed (truncated),
    // as the job-level statements (the commit status at a job's end) follow
    // the planner's defaults.
    await pool.query('truncate jobs cascade');
    await pool.query('analyze tasks, task_attempts, log_chunks');
  }
  const lane = newLane();
  const registered = await stack.call('POST', '/v1/workers', {
    token: stack.adminToken,
    body: { name: 'plans', labels: [lane] },
  });
  assert.equal(registered.status, 201);
  const token: string = registered.body.token;
  const n = 100;
  const project = await makeProject(pool);
  await startedJob(
    pool,
    project,
    Array.from({ length: n }, (_, i) => laneSpec(lane, `t${i}`)),
  );

  const cycle = async (i: number) => {
    const claim = await stack.call('POST', '/v1/runner/claim', {
      token,
      body: {},
      headers: { 'idempotency-key': `claim-${i}` },
    });
    assert.equal(claim.status, 200, `claim ${i}: ${claim.text}`);
    const { id, lease_id } = claim.body.task as { id: string; lease_id: string };
    const path = `/v1/runner/tasks/${id}`;
    const beat = await stack.call('POST', `${path}/heartbeat`, { token, body: { lease_id } });
    assert.equal(beat.status, 200, `heartbeat ${i}: ${beat.text}`);
    const log = await stack.call('POST', `${path}/logs`, {
      token,
      body: { lease_id, offset: 0, data: `step ${i}\n` },
    });
    assert.equal(log.status, 200, `logs ${i}: ${log.text}`);
    const done = await stack.call('POST', `${path}/complete`, {
      token,
      body: { lease_id, outcome: 'success', exit_code: 0 },
    });
    assert.equal(done.status, 200, `complete ${i}: ${done.text}`);
    return done.body as { state: string; job_state: string | null };
  };
  // A first round makes the plans (a generic plan comes after five calls).
  for (let i = 0; i < 20; i++) await cycle(i);
  let last: { state: string; job_state: string | null } | undefined;
  const scanned = await scansDuring([pool], TABLES, async () => {
    for (let i = 20; i < n; i++) last = await cycle(i);
  });
  assert.deepEqual(last, { state: 'success', job_state: 'success' });
  return scanned;
}

test("a runner's claims, heartbeats, logs and completions scan no table on a new database", async () => {
  assert.deepEqual(await runnerCycles(false), [], 'sequential scans over 80 cycles');
});

test("a runner's claims, heartbeats, logs and completions scan no table after its tables were analysed empty", async () => {
  assert.deepEqual(await runnerCycles(true), [], 'sequential scans over 80 cycles');
});
