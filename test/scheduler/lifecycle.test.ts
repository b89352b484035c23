import assert from 'node:assert/strict';
import { test } from 'node:test';
import { claimTask, failJob, heartbeat, startJob } from '../../lib/scheduler/index.ts';
import { sha, spec } from '../helpers/fixtures.ts';
import { schedulerDatabase } from '../helpers/scheduler.ts';

const db = await schedulerDatabase(import.meta.filename);
const { pool } = db;

test('a new job is pending with the next number of its project', async () => {
  const project = await db.makeProject();
  const a = await db.pendingJob(project, { sha: sha(1) });
  const b = await db.pendingJob(project, { ref: 'refs/heads/dev', sha: sha(2) });
  assert.equal(a.job.state, 'pending');
  assert.equal(a.job.number, 1);
  assert.equal(b.job.number, 2);
});

test('a job runs its DAG to success: fan-out, fan-in, outputs stored', async () => {
  const { worker, job } = await db.runningJob([
    spec('build', { outputs: ['version'] }),
    spec('test-a', { needs: ['build'] }),
    spec('test-b', { needs: ['build'] }),
    spec('publish', { needs: ['test-a', 'test-b'] }),
  ]);
  let tasks = await db.tasksOf(job.id);
  assert.equal(tasks.build!.state, 'queued');
  assert.equal(tasks.publish!.state, 'waiting');
  assert.equal(await db.jobState(job.id), 'running');

  const build = await db.claimNamed(worker, 'build');
  assert.equal(build.attempt, 1);
  assert.ok(build.lease_id);
  const hb = await heartbeat(pool, worker, build.id, build.lease_id!);
  assert.equal(hb.cancel, false);
  const done = await db.finish(worker, build, 'success', {
    exitCode: 0,
    outputs: { version: '1.2.3' },
  });
  assert.deepEqual([done.state, done.job_state], ['success', null]);
  tasks = await db.tasksOf(job.id);
  assert.equal(tasks['test-a']!.state, 'queued');
  assert.equal(tasks['test-b']!.state, 'queued');
  assert.equal(tasks.publish!.state, 'waiting');

  for (const name of ['test-a', 'test-b']) {
    const t = await db.claimNamed(worker, name);
    await db.finish(worker, t, 'success');
  }
  const publish = await db.claimNamed(worker, 'publish');
  const last = await db.finish(worker, publish, 'success');
  assert.deepEqual([last.state, last.job_state], ['success', 'success']);
  assert.equal(await db.jobState(job.id), 'success');
  const { rows } = await pool.query('select name, value from task_outputs where task_id = $1', [
    build.id,
  ]);
  assert.deepEqual(rows, [{ name: 'version', value: '1.2.3' }]);
  assert.equal(await claimTask(pool, worker, []), null, 'nothing is left to claim');
});

test('a compile failure fails the job with every error', async () => {
  const project = await db.makeProject();
  const { job } = await db.pendingJob(project);
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
  const project = await db.makeProject();
  const { job } = await db.pendingJob(project);
  const started = await startJob(pool, job.id, { name: null, tasks: [] });
  assert.deepEqual(started, { started: true, state: 'success', jobState: 'success' });
});

test('starting a job twice starts it once', async () => {
  const project = await db.makeProject();
  const { job } = await db.pendingJob(project);
  const first = await startJob(pool, job.id, { name: null, tasks: [spec('a')] });
  const second = await startJob(pool, job.id, {
    name: null,
    tasks: [spec('a'), spec('b', { position: 1 })],
  });
  assert.equal(first.started, true);
  assert.equal(second.started, false);
  assert.deepEqual(Object.keys(await db.tasksOf(job.id)), ['a']);
});
