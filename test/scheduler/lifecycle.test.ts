import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  claimTask,
  completeTask,
  createJob,
  failJob,
  heartbeat,
  startJob,
} from '../../lib/scheduler/index.ts';
import { testDatabase } from '../helpers/db.ts';
import {
  claimNamed,
  jobState,
  makeProject,
  makeWorker,
  sha,
  spec,
  startedJob,
  tasksOf,
} from '../helpers/fixtures.ts';

const { pool } = await testDatabase(import.meta.filename);

test('a new job is pending with the next number of its project', async () => {
  const project = await makeProject(pool);
  const a = await createJob(pool, {
    projectId: project,
    ref: 'refs/heads/main',
    sha: sha(1),
    trigger: 'push',
    trusted: true,
  });
  const b = await createJob(pool, {
    projectId: project,
    ref: 'refs/heads/dev',
    sha: sha(2),
    trigger: 'push',
    trusted: true,
  });
  assert.equal(a.job.state, 'pending');
  assert.equal(a.job.number, 1);
  assert.equal(b.job.number, 2);
});

test('a job runs its DAG to success: fan-out, fan-in, outputs stored', async () => {
  const project = await makeProject(pool);
  const worker = await makeWorker(pool);
  const job = await startedJob(pool, project, [
    spec('build', { outputs: ['version'] }),
    spec('test-a', { needs: ['build'] }),
    spec('test-b', { needs: ['build'] }),
    spec('publish', { needs: ['test-a', 'test-b'] }),
  ]);
  let tasks = await tasksOf(pool, job.id);
  assert.equal(tasks.build!.state, 'queued');
  assert.equal(tasks.publish!.state, 'waiting');
  assert.equal(await jobState(pool, job.id), 'running');

  const build = await claimNamed(pool, worker, 'build');
  assert.equal(build.attempt, 1);
  assert.ok(build.lease_id);
  const hb = await heartbeat(pool, worker, build.id, build.lease_id!);
  assert.equal(hb.cancel, false);
  const done = await completeTask(pool, {
    workerId: worker,
    taskId: build.id,
    leaseId: build.lease_id!,
    outcome: 'success',
    exitCode: 0,
    outputs: { version: '1.2.3' },
  });
  assert.deepEqual([done.state, done.job_state], ['success', null]);
  tasks = await tasksOf(pool, job.id);
  assert.equal(tasks['test-a']!.state, 'queued');
  assert.equal(tasks['test-b']!.state, 'queued');
  assert.equal(tasks.publish!.state, 'waiting');

  for (const name of ['test-a', 'test-b']) {
    const t = await claimNamed(pool, worker, name);
    await completeTask(pool, {
      workerId: worker,
      taskId: t.id,
      leaseId: t.lease_id!,
      outcome: 'success',
    });
  }
  const publish = await claimNamed(pool, worker, 'publish');
  const last = await completeTask(pool, {
    workerId: worker,
    taskId: publish.id,
    leaseId: publish.lease_id!,
    outcome: 'success',
  });
  assert.deepEqual([last.state, last.job_state], ['success', 'success']);
  assert.equal(await jobState(pool, job.id), 'success');
  const { rows } = await pool.query('select name, value from task_outputs where task_id = $1', [
    build.id,
  ]);
  assert.deepEqual(rows, [{ name: 'version', value: '1.2.3' }]);
  assert.equal(await claimTask(pool, worker, []), null, 'nothing is left to claim');
});

test('a compile failure fails the job with every error', async () => {
  const project = await makeProject(pool);
  const { job } = await createJob(pool, {
    projectId: project,
    ref: 'refs/heads/main',
    sha: sha(),
    trigger: 'push',
    trusted: true,
  });
  const errors = [
    { line: 3, column: 5, path: 'tasks.a.script', message: 'required' },
    { line: 7, column: 9, path: 'tasks.b.needs[0]', message: 'unknown task "c"' },
  ];
  assert.equal(await failJob(pool, job.id, 'two problems', errors), true);
  const { rows } = await pool.query(
    'select state, error, errors, finished_at from jobs where id = $1',
    [job.id],
  );
  assert.equal(rows[0].state, 'failed');
  assert.deepEqual(rows[0].errors, errors);
  assert.ok(rows[0].finished_at);
  assert.equal(
    await failJob(pool, job.id, 'again'),
    false,
    'only a pending job can fail to compile',
  );
});

test('a job with no tasks left after filtering settles success when it starts', async () => {
  const project = await makeProject(pool);
  const { job } = await createJob(pool, {
    projectId: project,
    ref: 'refs/heads/main',
    sha: sha(),
    trigger: 'push',
    trusted: true,
  });
  const started = await startJob(pool, job.id, { name: null, tasks: [] });
  assert.deepEqual(started, { started: true, state: 'success', jobState: 'success' });
});

test('starting a job twice starts it once', async () => {
  const project = await makeProject(pool);
  const { job } = await createJob(pool, {
    projectId: project,
    ref: 'refs/heads/main',
    sha: sha(),
    trigger: 'push',
    trusted: true,
  });
  const first = await startJob(pool, job.id, { name: null, tasks: [spec('a')] });
  const second = await startJob(pool, job.id, {
    name: null,
    tasks: [spec('a'), spec('b', { position: 1 })],
  });
  assert.equal(first.started, true);
  assert.equal(second.started, false);
  assert.deepEqual(Object.keys(await tasksOf(pool, job.id)), ['a']);
});
