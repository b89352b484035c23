// `when:` on a task (issue #29): `always` runs once its needs are final,
// whatever they ended as; `on_failure` only after a failure upstream; the
// job's state comes from the tasks that matter, so a failed build stays
// failed though its cleanup succeeded. On real PostgreSQL, through the
// scheduler's claim and complete, as a runner drives them.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type CompiledPipeline, compilePipeline } from '../../lib/pipeline/index.ts';
import { type ClaimedTask, completeTask, sweep } from '../../lib/scheduler/index.ts';
import { testDatabase } from '../helpers/db.ts';
import {
  claimNamed,
  jobState,
  makeProject,
  makeWorker,
  startedJob,
  tasksOf,
} from '../helpers/fixtures.ts';
import { newLane } from '../helpers/race.ts';

const db = await testDatabase(import.meta.filename, { poolMax: 6 });
const { pool } = db;

/** The tasks of a pipeline file as the compiler makes them, each in `lane`. */
function compiled(text: string, lane: string) {
  const pipeline = compilePipeline(text, { ref: 'refs/heads/main', event: 'push' });
  assert.ok('tasks' in pipeline);
  return (pipeline as CompiledPipeline).tasks.map((t) => ({ ...t, labels: [lane] }));
}

async function finish(task: ClaimedTask, outcome: 'success' | 'failed') {
  return completeTask(pool, {
    workerId: task.worker_id!,
    taskId: task.id,
    leaseId: task.lease_id!,
    outcome,
    exitCode: outcome === 'success' ? 0 : 1,
  });
}

const PIPELINE = `version: 1
tasks:
  build:
    script: [make]
  test:
    needs: [build]
    script: [make test]
  cleanup:
    needs: [test]
    when: always
    script: [rm -rf tmp]
  notify:
    needs: [test]
    when: on_failure
    script: [./notify]
  deploy:
    needs: [test]
    script: [./deploy]
`;

test('after a failed build: cleanup (always) and notify (on_failure) run, deploy is skipped, and the job stays failed', async () => {
  const project = await makeProject(pool);
  const lane = newLane();
  const worker = await makeWorker(pool, [lane]);
  const job = await startedJob(pool, project, compiled(PIPELINE, lane));
  const claim = (name: string) => claimNamed(pool, worker, name, { labels: [lane] });

  await finish(await claim('build'), 'failed');
  // test and deploy are skipped by the failure; cleanup and notify, past the
  // skipped test, are queued by the same follow-up.
  let tasks = await tasksOf(pool, job.id);
  assert.equal(tasks.test!.state, 'skipped');
  assert.equal(tasks.deploy!.state, 'skipped');
  assert.equal(tasks.cleanup!.state, 'queued');
  assert.equal(tasks.notify!.state, 'queued');
  assert.equal(await jobState(pool, job.id), 'running');

  const first = await claimTask2(claim, ['cleanup', 'notify']);
  await finish(first[0]!, 'success');
  const last = await finish(first[1]!, 'success');
  tasks = await tasksOf(pool, job.id);
  assert.equal(tasks.cleanup!.state, 'success');
  assert.equal(tasks.notify!.state, 'success');
  assert.equal(
    last.job_state,
    'failed',
    'the build failed: the job is failed though cleanup passed',
  );
  assert.equal(await jobState(pool, job.id), 'failed');
});

/** Claims the two named tasks in the order the queue hands them out. */
async function claimTask2(
  claim: (name: string) => Promise<ClaimedTask>,
  names: [string, string],
): Promise<ClaimedTask[]> {
  // Both are queued at the same position order: cleanup comes first in the file.
  return [await claim(names[0]), await claim(names[1])];
}

test('after a passing build: cleanup (always) runs, notify (on_failure) is skipped saying why, and the job succeeds', async () => {
  const project = await makeProject(pool);
  const lane = newLane();
  const worker = await makeWorker(pool, [lane]);
  const job = await startedJob(pool, project, compiled(PIPELINE, lane));
  const claim = (name: string) => claimNamed(pool, worker, name, { labels: [lane] });

  await finish(await claim('build'), 'success');
  await finish(await claim('test'), 'success');
  const tasks = await tasksOf(pool, job.id);
  assert.equal(tasks.notify!.state, 'skipped');
  assert.equal(tasks.notify!.error, 'skipped: nothing it needs failed (when: on_failure)');
  assert.equal(tasks.cleanup!.state, 'queued');
  await finish(await claim('cleanup'), 'success');
  const done = await finish(await claim('deploy'), 'success');
  assert.equal(done.job_state, 'success');
});

test('a failing always task fails the job', async () => {
  const project = await makeProject(pool);
  const lane = newLane();
  const worker = await makeWorker(pool, [lane]);
  const job = await startedJob(
    pool,
    project,
    compiled(
      `version: 1
tasks:
  build: {script: [make]}
  cleanup: {needs: [build], when: always, script: [rm]}
`,
      lane,
    ),
  );
  const claim = (name: string) => claimNamed(pool, worker, name, { labels: [lane] });
  await finish(await claim('build'), 'success');
  const done = await finish(await claim('cleanup'), 'failed');
  assert.equal(done.job_state, 'failed');
  assert.equal(await jobState(pool, job.id), 'failed');
});

test('an always task whose follow-up was lost is queued by the sweep', async () => {
  const project = await makeProject(pool);
  const lane = newLane();
  const worker = await makeWorker(pool, [lane]);
  const job = await startedJob(
    pool,
    project,
    compiled(
      `version: 1
tasks:
  build: {script: [make]}
  test: {needs: [build], script: [make test]}
  cleanup: {needs: [test], when: always, script: [rm]}
`,
      lane,
    ),
  );
  const build = await claimNamed(pool, worker, 'build', { labels: [lane] });
  // The failure as its transaction commits it, without the follow-up (a
  // crash between the two): the skip of test happens with the failure.
  await pool.query(`update tasks set state = 'failed', finished_at = now() where id = $1`, [
    build.id,
  ]);
  await pool.query(
    `update tasks set state = 'skipped', finished_at = now() where job_id = $1 and name = 'test'`,
    [job.id],
  );
  assert.equal((await tasksOf(pool, job.id)).cleanup!.state, 'waiting');
  await sweep(pool);
  assert.equal((await tasksOf(pool, job.id)).cleanup!.state, 'queued');
});

test('a cancelled job cancels its always task too', async () => {
  const project = await makeProject(pool);
  const lane = newLane();
  const job = await startedJob(
    pool,
    project,
    compiled(
      `version: 1
tasks:
  build: {script: [make]}
  cleanup: {needs: [build], when: always, script: [rm]}
`,
      lane,
    ),
  );
  const { cancelJob } = await import('../../lib/scheduler/index.ts');
  await cancelJob(pool, job.id, 'cancelled by a test');
  const tasks = await tasksOf(pool, job.id);
  assert.equal(tasks.cleanup!.state, 'cancelled');
  assert.equal(await jobState(pool, job.id), 'cancelled');
});

test('the trigger filter leaves a task out of jobs it does not name, as only does', () => {
  const text = `version: 1
tasks:
  build: {script: [make]}
  nightly:
    when: {trigger: [schedule], schedule: [nightly]}
    script: [./long-tests]
  report: {needs: [nightly], script: [./report]}
  manual_only: {when: {trigger: manual}, script: [ls]}
`;
  const names = (trigger: Parameters<typeof compilePipeline>[1]) => {
    const result = compilePipeline(text, trigger);
    assert.ok('tasks' in result);
    return result.tasks.map((t) => t.name);
  };
  assert.deepEqual(names({ ref: 'refs/heads/main', event: 'push' }), ['build']);
  assert.deepEqual(names({ ref: 'refs/heads/main', event: 'manual' }), ['build', 'manual_only']);
  assert.deepEqual(names({ ref: 'refs/heads/main', event: 'schedule', schedule: 'nightly' }), [
    'build',
    'nightly',
    'report',
  ]);
  assert.deepEqual(names({ ref: 'refs/heads/main', event: 'schedule', schedule: 'weekly' }), [
    'build',
  ]);
});

test('a bad when names the field and what it takes', () => {
  assert.throws(
    () =>
      compilePipeline(
        `version: 1
tasks:
  a: {script: [ls], when: sometimes}
  b: {script: [ls], when: {trigger: [cron]}}
`,
        { ref: 'refs/heads/main', event: 'push' },
      ),
    (err: Error) => {
      assert.match(
        err.message,
        /\.conductor\.yml:3:\d+: tasks\.a\.when: expected on_success, on_failure, always or a map/,
      );
      assert.match(
        err.message,
        /\.conductor\.yml:4:\d+: tasks\.b\.when\.trigger\[0\]: "cron" is not a trigger/,
      );
      return true;
    },
  );
});

test('ctl validate explains a task the trigger filter leaves out', async () => {
  const { planPipeline } = await import('../../lib/app/jobs.ts');
  const plan = await planPipeline(
    `version: 1
tasks:
  build: {script: [make]}
  nightly:
    when: {trigger: [schedule], schedule: [nightly]}
    script: [./long-tests]
  report: {needs: [nightly], script: [./report]}
`,
    { ref: 'refs/heads/main', event: 'push' },
    async () => ({ error: 'no files here' }),
  );
  assert.ok('leftOut' in plan);
  assert.deepEqual(plan.leftOut, [
    {
      name: 'nightly',
      reason: 'when: {trigger: schedule; schedule: nightly} does not match push',
    },
    { name: 'report', reason: 'needs nightly, left out' },
  ]);
});
