// The claim's guards at READ COMMITTED (issue #47). The pool runs every claim
// at REPEATABLE READ, where the second writer of an ephemeral worker's row or
// of a concurrency group's row raises 40001. A session the pool did not set
// up (psql, a maintenance script, a proxy that drops startup options) runs
// at READ COMMITTED: there the second writer waits for the first and then
// wrote over it, so an ephemeral worker claimed twice and a limit-1 group ran
// two tasks. Each race is forced: the first claim stays open (its
// transaction not committed) until the second is seen waiting for its lock.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';
import pg from 'pg';
import { claimTask, completeTask, createJob, startJob } from '../../lib/scheduler/index.ts';
import type { TaskSpec } from '../../lib/scheduler/types.ts';
import { testDatabase } from '../helpers/db.ts';
import { makeProject, makeWorker, sha, startedJob, tasksOf } from '../helpers/fixtures.ts';
import { laneSpec, newLane, until } from '../helpers/race.ts';

const db = await testDatabase(import.meta.filename, { poolMax: 6 });
const { pool } = db;

/** A claim on a connection of its own at READ COMMITTED, left open until `end`. */
async function openClaim(worker: string, lane: string) {
  const c = new pg.Client({ connectionString: db.url });
  await c.connect();
  await c.query('begin isolation level read committed');
  const leaseId = randomUUID();
  const answer = c
    .query<{ name: string }>(
      'select (x.task).name from conductor_claim($1, $2::text[], 60, $3, null) x',
      [worker, [lane], leaseId],
    )
    .then(
      (r) => r.rows[0]?.name ?? null,
      (e: { code?: string }) => `error ${e.code}`,
    );
  const pid = (c as unknown as { processID: number }).processID;
  return {
    leaseId,
    answer,
    /** Resolves once this claim waits for a lock another transaction holds. */
    waiting: () =>
      until('the second claim waits for the first', async () => {
        const { rows } = await pool.query<{ w: boolean }>(
          `select wait_event_type = 'Lock' as w from pg_stat_activity where pid = $1`,
          [pid],
        );
        return rows[0]?.w === true;
      }),
    /** Commits (or, after an error, rolls back) and closes the connection. */
    async end() {
      const got = await answer;
      await c.query(got?.startsWith('error') ? 'rollback' : 'commit');
      await c.end();
      return got;
    },
  };
}

test("an ephemeral worker's second claim at READ COMMITTED, made while its first was open, claims nothing", async () => {
  const project = await makeProject(pool);
  const worker = await makeWorker(pool);
  await pool.query('update workers set ephemeral = true where id = $1', [worker]);
  const lane = newLane();
  const job = await startedJob(pool, project, [laneSpec(lane, 'a'), laneSpec(lane, 'b')]);

  const first = await openClaim(worker, lane);
  assert.equal(await first.answer, 'a');
  const second = await openClaim(worker, lane);
  await second.waiting();
  assert.equal(await first.end(), 'a');
  assert.equal(await second.end(), 'error 40001', 'the second rolls back');
  assert.equal(await claimTask(pool, worker, [lane]), null, 'and a claim again gets nothing');

  const tasks = await tasksOf(pool, job.id);
  assert.deepEqual([tasks.a!.state, tasks.b!.state], ['running', 'queued']);
  const { rows } = await pool.query('select claimed_lease from workers where id = $1', [worker]);
  assert.equal(rows[0].claimed_lease, first.leaseId, 'the one claim is the first');
});

test('a second claim at READ COMMITTED into a limit-1 group whose slot a first, open claim took claims nothing', async () => {
  const project = await makeProject(pool);
  const [w1, w2] = [await makeWorker(pool), await makeWorker(pool)];
  const lane = newLane();
  const prod: Partial<TaskSpec> = { concurrency: { group: 'prod', limit: 1, mode: 'queue' } };
  // The older job's deploy is queued only after the first claim took the
  // later job's: then it heads the group in the second claim's snapshot,
  // where the group's one running task is not visible yet.
  const older = await startedJob(pool, project, [
    laneSpec(lane, 'build'),
    laneSpec(lane, 'deploy', { ...prod, needs: ['build'] }),
  ]);
  const build = await claimTask(pool, w1, [lane]);
  assert.equal(build?.name, 'build');
  const later = await startedJob(pool, project, [laneSpec(lane, 'deploy', prod)]);

  const first = await openClaim(w1, lane);
  assert.equal(await first.answer, 'deploy');
  await completeTask(pool, {
    workerId: w1,
    taskId: build!.id,
    leaseId: build!.lease_id!,
    outcome: 'success',
  });
  assert.equal((await tasksOf(pool, older.id)).deploy!.state, 'queued');
  const second = await openClaim(w2, lane);
  await second.waiting();
  assert.equal(await first.end(), 'deploy');
  assert.equal(await second.end(), 'error 40001', 'the second rolls back');

  const { rows } = await pool.query<{ job_id: string }>(
    `select job_id from tasks where concurrency_key = $1 and state = 'running'`,
    [(await tasksOf(pool, later.id)).deploy!.concurrency_key],
  );
  assert.deepEqual(rows, [{ job_id: later.id }], 'the group runs one task');
  assert.equal(await claimTask(pool, w2, [lane]), null, 'and a claim again finds it full');
});

test("a second claim at READ COMMITTED into a pipeline's limit-1 group whose slot a first, open claim took claims nothing", async () => {
  const project = await makeProject(pool, { cancelSuperseded: false });
  const [w1, w2] = [await makeWorker(pool), await makeWorker(pool)];
  const lane = newLane();
  const release = { group: 'release', limit: 1, mode: 'queue' } as const;
  const job = () =>
    createJob(pool, {
      projectId: project,
      ref: 'refs/heads/main',
      sha: sha(),
      trigger: 'push',
      trusted: true,
    });
  const start = (id: string) =>
    startJob(pool, id, {
      name: null,
      concurrency: release,
      tasks: [{ ...laneSpec(lane, 'ship'), position: 0 }],
    });
  // The older job starts only after the first claim took the later job's
  // slot: then it heads the group in the second claim's snapshot, where no
  // job holds the group yet.
  const older = (await job()).job;
  const later = (await job()).job;
  await start(later.id);

  const first = await openClaim(w1, lane);
  assert.equal(await first.answer, 'ship');
  await start(older.id);
  const second = await openClaim(w2, lane);
  await second.waiting();
  assert.equal(await first.end(), 'ship');
  assert.equal(await second.end(), 'error 40001', 'the second rolls back');

  const { rows } = await pool.query<{ id: string }>(
    `select id from jobs where id = any($1::uuid[]) and group_held`,
    [[older.id, later.id]],
  );
  assert.deepEqual(rows, [{ id: later.id }], 'one job holds the group');
  assert.equal((await tasksOf(pool, older.id)).ship!.state, 'queued');
  assert.equal(await claimTask(pool, w2, [lane]), null, 'and a claim again finds it full');
});
