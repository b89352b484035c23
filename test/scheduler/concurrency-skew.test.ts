// Two claimers whose snapshots see different heads of one group (#30 review):
// job 1 is created before job 2 but started after it, so its task joins the
// group's queue ahead of job 2's after a first claimer's snapshot was taken
// and the two lock different tasks. Both count no holder; the group's row
// (migrations/017) makes the second to commit retry, count the first's
// holder and claim nothing: one slot, one holder.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { claimTask, createJob, startJob } from '../../lib/scheduler/index.ts';
import { testDatabase } from '../helpers/db.ts';
import { makeProject, makeWorker } from '../helpers/fixtures.ts';
import { holdTable, laneSpec, newLane, racePool, settle, untilWaiting } from '../helpers/race.ts';

const db = await testDatabase(import.meta.filename, { poolMax: 4 });
const { pool } = db;
const racing = { url: db.url, applicationName: 'review-30-skew' };

const sha = () => randomBytes(20).toString('hex');

test('limit 1: of a claim whose snapshot predates an older job start and one after it, only one takes the slot', async () => {
  const project = await makeProject(pool);
  const lane = newLane();
  const w1 = await makeWorker(pool);
  const w2 = await makeWorker(pool);
  const concurrency = { group: 'deploy', limit: 1, mode: 'queue' as const };
  const mk = () =>
    createJob(pool, {
      projectId: project,
      ref: `refs/heads/b-${randomBytes(3).toString('hex')}`,
      sha: sha(),
      trigger: 'push',
      trusted: true,
    });
  const j1 = (await mk()).job; // older: created first
  const j2 = (await mk()).job;
  const tasks = [{ ...laneSpec(lane, 'deploy', { concurrency }), position: 0 }];
  await startJob(pool, j2.id, { name: null, tasks }); // compiled first
  const racers = await racePool(racing, 2);
  try {
    const hold = await holdTable(pool, 'task_attempts');
    let a: Promise<PromiseSettledResult<unknown>> | undefined;
    let b: Promise<PromiseSettledResult<unknown>> | undefined;
    try {
      a = settle(claimTask(racers, w1, [lane])); // snapshot: job 2's task heads the group
      await untilWaiting(pool, racing, 1);
      await startJob(pool, j1.id, { name: null, tasks }); // job 1's task now heads it
      b = settle(claimTask(racers, w2, [lane]));
      await untilWaiting(pool, racing, 2);
    } finally {
      await hold();
    }
    const got = [await a!, await b!].map((r) => (r.status === 'fulfilled' ? r.value : r.reason));
    const { rows } = await pool.query<{ n: number }>(
      `select count(*)::int as n from tasks where concurrency_key = $1 and state = 'running'`,
      [`${project}/deploy`],
    );
    assert.ok(
      got.every((g) => !(g instanceof Error)),
      'neither claim failed',
    );
    assert.equal(got.filter((g) => g).length, 1, 'one claim answered a task, the other nothing');
    assert.equal(rows[0]!.n, 1, 'a group of limit 1 never has two running tasks');
  } finally {
    await racers.end();
  }
});

test('pipeline-level limit 1: of a claim whose snapshot predates an older job start and one after it, only one takes the slot', async () => {
  const project = await makeProject(pool);
  const lane = newLane();
  const w1 = await makeWorker(pool);
  const w2 = await makeWorker(pool);
  const concurrency = { group: 'deploy', limit: 1, mode: 'queue' as const };
  const mk = () =>
    createJob(pool, {
      projectId: project,
      ref: `refs/heads/b-${randomBytes(3).toString('hex')}`,
      sha: sha(),
      trigger: 'push',
      trusted: true,
    });
  const j1 = (await mk()).job; // older: created first
  const j2 = (await mk()).job;
  const tasks = [{ ...laneSpec(lane, 'deploy'), position: 0 }];
  await startJob(pool, j2.id, { name: null, tasks, concurrency }); // compiled first
  const racers = await racePool(racing, 2);
  try {
    const hold = await holdTable(pool, 'task_attempts');
    let a: Promise<PromiseSettledResult<unknown>> | undefined;
    let b: Promise<PromiseSettledResult<unknown>> | undefined;
    try {
      a = settle(claimTask(racers, w1, [lane])); // snapshot: job 2's task heads the group
      await untilWaiting(pool, racing, 1);
      await startJob(pool, j1.id, { name: null, tasks, concurrency }); // job 1's task now heads it
      b = settle(claimTask(racers, w2, [lane]));
      await untilWaiting(pool, racing, 2);
    } finally {
      await hold();
    }
    const got = [await a!, await b!].map((r) => (r.status === 'fulfilled' ? r.value : r.reason));
    const { rows } = await pool.query<{ n: number }>(
      `select count(*)::int as n from jobs where concurrency_key = $1 and state = 'running' and group_held`,
      [`${project}/deploy`],
    );
    assert.ok(
      got.every((g) => !(g instanceof Error)),
      'neither claim failed',
    );
    assert.equal(got.filter((g) => g).length, 1, 'one claim answered a task, the other nothing');
    assert.equal(rows[0]!.n, 1, 'a pipeline group of limit 1 never has two holding jobs');
  } finally {
    await racers.end();
  }
});
