// The sweep's queue timeout and concurrency groups (issue #47). A task the
// claim holds back for its group waits for the group, not for a worker: the
// sweep asks the claim's own rule (before, its copy compared the running
// count with the task's own limit and failed a task a limit-1 holder kept
// waiting), asks it again under the task's lock, and counts the timeout from
// when the group let the task be claimed (before, from queued_at: the first
// sweep after a long group wait failed the new head at once). Time passing is
// forced by moving the rows' timestamps back, never by waiting.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { claimTask, createJob, getJobView, startJob, sweep } from '../../lib/scheduler/index.ts';
import type { TaskSpec } from '../../lib/scheduler/types.ts';
import { makeProject, makeWorker, sha, startedJob, tasksOf } from '../helpers/fixtures.ts';
import {
  holdRows,
  laneSpec,
  newLane,
  settle,
  settledValue,
  untilWaiting,
  withRacers,
} from '../helpers/race.ts';
import { schedulerDatabase } from '../helpers/scheduler.ts';

const db = await schedulerDatabase(import.meta.filename);
const { pool } = db;
const racing = { url: db.url, applicationName: 'conductor-queue-timeout-groups' };

const group = (limit: number): Partial<TaskSpec> => ({
  concurrency: { group: 'prod', limit, mode: 'queue' },
});

/** Moves a column of these rows two hours into the past, as if that long had gone by. */
async function backdate(table: string, column: string, where: string, values: unknown[]) {
  await pool.query(
    `update ${table} set ${column} = ${column} - interval '2 hours' where ${where}`,
    values,
  );
}

async function taskState(id: string): Promise<{ state: string; error: string | null }> {
  const { rows } = await pool.query('select state, error from tasks where id = $1', [id]);
  return rows[0];
}

test('a later task declaring limit 2, held back by the limit-1 holder, survives sweeps past its queue timeout', async () => {
  const project = await makeProject(pool);
  const worker = await makeWorker(pool);
  const lane = newLane();
  const first = await startedJob(pool, project, [laneSpec(lane, 'deploy', group(1))]);
  const holder = await claimTask(pool, worker, [lane]);
  assert.equal(holder?.job_id, first.id);
  const later = await startedJob(pool, project, [
    laneSpec(lane, 'deploy', { ...group(2), queueTimeoutS: 60 }),
  ]);
  const waiting = (await tasksOf(pool, later.id)).deploy!;
  // Queued two hours ago, beside a holder that took its slot two hours ago.
  await backdate('tasks', 'queued_at', 'id = $1', [waiting.id]);
  await backdate('concurrency_groups', 'taken_at', `key = 'task:' || $1`, [
    waiting.concurrency_key!,
  ]);

  for (const _ of [1, 2]) {
    const swept = await sweep(pool);
    assert.equal(swept.tasks_queue_timed_out, 0);
    assert.deepEqual(await taskState(waiting.id), { state: 'queued', error: null });
  }
  assert.equal(await claimTask(pool, worker, [lane]), null, 'the claim holds it back');
  const view = await getJobView(pool, later.id);
  assert.match(view.tasks[0]?.queue_reason ?? '', /^waiting for group prod, held by job #\d+/);

  // Once the holder ended two hours ago too, it has waited for a worker as
  // long as its timeout: then it fails, naming that.
  await db.finish(worker, holder!, 'success');
  await backdate('tasks', 'finished_at', 'id = $1', [holder!.id]);
  await backdate('jobs', 'finished_at', 'id = $1', [first.id]);
  const swept = await sweep(pool);
  assert.equal(swept.tasks_queue_timed_out, 1);
  const failed = await taskState(waiting.id);
  assert.equal(failed.state, 'failed');
  assert.match(
    failed.error ?? '',
    /^no worker with labels \[lane-[^\]]+\] \(trusted pool\) claimed it within 1m/,
  );
});

test("the group's new head after a long group wait is not failed by the next sweep", async () => {
  const project = await makeProject(pool);
  const worker = await makeWorker(pool);
  const lane = newLane();
  await startedJob(pool, project, [laneSpec(lane, 'deploy', group(1))]);
  const holder = await claimTask(pool, worker, [lane]);
  const later = await startedJob(pool, project, [
    laneSpec(lane, 'deploy', { ...group(1), queueTimeoutS: 60 }),
  ]);
  const head = (await tasksOf(pool, later.id)).deploy!;
  // The holder ran for two hours, the whole time the later task was queued.
  await backdate('tasks', 'queued_at', 'id = $1', [head.id]);
  await backdate('concurrency_groups', 'taken_at', `key = 'task:' || $1`, [head.concurrency_key!]);
  assert.equal((await sweep(pool)).tasks_queue_timed_out, 0, 'it waits for the group');

  await db.finish(worker, holder!, 'success');
  const swept = await sweep(pool);
  assert.equal(swept.tasks_queue_timed_out, 0);
  assert.deepEqual(await taskState(head.id), { state: 'queued', error: null });
  assert.equal(
    (await claimTask(pool, worker, [lane]))?.id,
    head.id,
    'a worker that comes within its timeout claims it',
  );
});

test("a job's task queued before its job took the group's slot is not failed by the next sweep", async () => {
  const project = await makeProject(pool);
  const worker = await makeWorker(pool);
  const [x, y] = [newLane(), newLane()];
  const { job } = await createJob(pool, {
    projectId: project,
    ref: 'refs/heads/main',
    sha: sha(),
    trigger: 'push',
    trusted: true,
  });
  await startJob(pool, job.id, {
    name: null,
    concurrency: { group: 'release', limit: 1, mode: 'queue' },
    tasks: [
      { ...laneSpec(x, 'build', { queueTimeoutS: 60 }), position: 0 },
      { ...laneSpec(y, 'docs', { queueTimeoutS: 60 }), position: 1 },
    ],
  });
  const tasks = await tasksOf(pool, job.id);
  // Both queued two hours ago, while older jobs held the group.
  await backdate('tasks', 'queued_at', 'job_id = $1', [job.id]);
  const build = await claimTask(pool, worker, [x]);
  assert.equal(build?.id, tasks.build!.id, 'the job takes the group slot');
  const swept = await sweep(pool);
  assert.equal(swept.tasks_queue_timed_out, 0);
  assert.deepEqual(await taskState(tasks.docs!.id), { state: 'queued', error: null });
});

// The sweep finds the head past its timeout with its group open, then waits
// for the task's row lock (held here); meanwhile an older job's task of the
// group is queued and claimed, so the claim holds the head back again without
// touching its row. Under the lock the sweep must not fail it.
test('a head the claim holds back again while the sweep waits for its lock is not failed', async () => {
  const project = await makeProject(pool);
  const worker = await makeWorker(pool);
  const lane = newLane();
  const older = await startedJob(pool, project, [
    laneSpec(lane, 'build'),
    laneSpec(lane, 'deploy', { ...group(1), needs: ['build'] }),
  ]);
  const build = await claimTask(pool, worker, [lane]);
  assert.equal(build?.name, 'build');
  const later = await startedJob(pool, project, [
    laneSpec(lane, 'deploy', { ...group(1), queueTimeoutS: 60 }),
  ]);
  const head = (await tasksOf(pool, later.id)).deploy!;
  await backdate('tasks', 'queued_at', 'id = $1', [head.id]);

  const release = await holdRows(pool, 'tasks', [head.id]);
  const swept = await withRacers(racing, 2, async (racers) => {
    const sweeping = settle(sweep(racers, { lockTimeoutMs: 30_000 }));
    try {
      await untilWaiting(pool, racing, 1);
      await db.finish(worker, build!, 'success');
      const deploy = await claimTask(pool, worker, [lane]);
      assert.equal(deploy?.job_id, older.id, "the older job's deploy takes the slot");
    } finally {
      await release();
    }
    return settledValue(await sweeping, 'the sweep');
  });
  assert.equal(swept.tasks_queue_timed_out, 0);
  assert.deepEqual(await taskState(head.id), { state: 'queued', error: null });
});
