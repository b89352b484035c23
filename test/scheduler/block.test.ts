// Block steps (issue #30): a task that waits in `blocked`, runs no script,
// holds no runner, and goes on when unblocked (its fields its outputs), ends
// as on_timeout says when the sweep finds it past its deadline, and is
// cancelled and rerun as any task.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConflictError, ValidationError } from '../../lib/errors.ts';
import type { CompiledBlock } from '../../lib/pipeline/index.ts';
import { unblockTask } from '../../lib/scheduler/block.ts';
import { cancelJob, claimTask, rerunJob, sweep } from '../../lib/scheduler/index.ts';
import { spec } from '../helpers/fixtures.ts';
import { schedulerDatabase } from '../helpers/scheduler.ts';

const db = await schedulerDatabase(import.meta.filename);
const { pool } = db;

const BLOCK: CompiledBlock = {
  prompt: 'Deploy to production?',
  fields: [
    { name: 'reason', type: 'text', required: true, options: null },
    { name: 'region', type: 'select', required: false, options: ['eu', 'us'] },
  ],
  timeoutS: 3600,
  onTimeout: 'fail',
};

let lanes = 0;

/**
 * A running job build → approve (the block) → deploy. Its tasks carry a label
 * of their own and `claim` claims with it, so no test takes another's task.
 */
async function deployJob(block: CompiledBlock = BLOCK) {
  const labels = [`lane-${++lanes}`];
  const running = await db.runningJob([
    spec('build', { labels }),
    spec('approve', { needs: ['build'], script: [], block, outputs: ['reason', 'region'], labels }),
    spec('deploy', { needs: ['approve'], labels }),
  ]);
  const claim = (name: string) => db.claimNamed(running.worker, name, { labels });
  return { ...running, labels, claim };
}

async function statuses(jobId: string): Promise<string[]> {
  const { rows } = await pool.query<{ description: string }>(
    'select description from status_outbox where job_id = $1 order by id',
    [jobId],
  );
  return rows.map((r) => r.description);
}

test('a block step waits blocked once its needs are met, holding no runner, and the job does not settle', async () => {
  const { worker, job, claim, labels } = await deployJob();
  const build = await claim('build');
  await db.finish(worker, build, 'success');
  const tasks = await db.tasksOf(job.id);
  assert.equal(tasks.approve?.state, 'blocked');
  assert.equal(tasks.approve?.worker_id, null);
  assert.equal(tasks.deploy?.state, 'waiting');
  assert.equal(await claimTask(pool, worker, labels), null, 'nothing is claimable while blocked');
  assert.equal(await db.jobState(job.id), 'running');
  // And the sweep leaves it alone while its deadline is ahead.
  await sweep(pool);
  assert.equal((await db.tasksOf(job.id)).approve?.state, 'blocked');
});

test('unblocking with fields succeeds the block, records who and when, and hands the fields to what needs it', async () => {
  const { worker, job, claim } = await deployJob();
  await db.finish(worker, await claim('build'), 'success');
  const task = await unblockTask(
    pool,
    job.id,
    'approve',
    { reason: 'hotfix', region: 'eu' },
    'admin',
  );
  assert.equal(task.state, 'success');
  assert.equal(task.unblocked_by, 'admin');
  assert.ok(task.unblocked_at instanceof Date);
  const deploy = await claim('deploy');
  assert.deepEqual(deploy.needs_outputs, { approve: { reason: 'hotfix', region: 'eu' } });
  await db.finish(worker, deploy, 'success');
  assert.equal(await db.jobState(job.id), 'success');
});

test('an optional field left out is an empty output', async () => {
  const { worker, job, claim } = await deployJob();
  await db.finish(worker, await claim('build'), 'success');
  await unblockTask(pool, job.id, 'approve', { reason: 'because' }, 'admin');
  const deploy = await claim('deploy');
  assert.deepEqual(deploy.needs_outputs, { approve: { reason: 'because', region: '' } });
});

test('bad fields are refused naming the field, and the task stays blocked', async () => {
  const { worker, job, claim } = await deployJob();
  await db.finish(worker, await claim('build'), 'success');
  const cases: Array<[Record<string, unknown>, RegExp]> = [
    [{}, /fields\.reason: is required/],
    [{ reason: '  ' }, /fields\.reason: is required/],
    [{ reason: 'x', region: 'mars' }, /fields\.region: must be one of eu, us/],
    [{ reason: 'x', colour: 'red' }, /fields\.colour: no such field/],
    [{ reason: 7 }, /fields\.reason: must be a string/],
  ];
  for (const [fields, message] of cases) {
    await assert.rejects(unblockTask(pool, job.id, 'approve', fields, 'admin'), (err) => {
      assert.ok(err instanceof ValidationError);
      assert.match(err.message, message);
      return true;
    });
  }
  assert.equal((await db.tasksOf(job.id)).approve?.state, 'blocked');
});

test('a task that is not blocked cannot be unblocked (409), nor one unblocked twice', async () => {
  const { worker, job, claim } = await deployJob();
  await assert.rejects(
    unblockTask(pool, job.id, 'approve', { reason: 'x' }, 'admin'),
    (err) => err instanceof ConflictError && /is waiting; only a blocked task/.test(err.message),
  );
  await db.finish(worker, await claim('build'), 'success');
  await unblockTask(pool, job.id, 'approve', { reason: 'x' }, 'admin');
  await assert.rejects(
    unblockTask(pool, job.id, 'approve', { reason: 'x' }, 'admin'),
    (err) => err instanceof ConflictError && /is success/.test(err.message),
  );
});

test('the commit status says "waiting for approval: <prompt>" while blocked', async () => {
  // Statuses are recorded only for a project with a forge token.
  const other = await deployJob();
  await pool.query(`update projects set forge_token_enc = 'sealed' where id = $1`, [
    other.job.project_id,
  ]);
  await db.finish(other.worker, await other.claim('build'), 'success');
  const seen = await statuses(other.job.id);
  assert.equal(seen.at(-1), 'waiting for approval: Deploy to production?');
  await unblockTask(pool, other.job.id, 'approve', { reason: 'x' }, 'admin');
  assert.equal((await statuses(other.job.id)).at(-1), 'approve unblocked by admin; running');
});

test('a block nobody unblocks fails at its deadline (on_timeout: fail), and what needs it is skipped', async () => {
  const { worker, job, claim } = await deployJob();
  await db.finish(worker, await claim('build'), 'success');
  await pool.query(
    `update tasks set block_deadline = now() - interval '1 second' where job_id = $1 and name = 'approve'`,
    [job.id],
  );
  const summary = await sweep(pool);
  assert.equal(summary.tasks_block_timed_out, 1);
  const tasks = await db.tasksOf(job.id);
  assert.equal(tasks.approve?.state, 'failed');
  assert.match(
    tasks.approve?.error ?? '',
    /nobody unblocked it within 3600 s; failed \(on_timeout: fail\)/,
  );
  assert.equal(tasks.deploy?.state, 'skipped');
  assert.equal(await db.jobState(job.id), 'failed');
});

test('on_timeout: skip ends the block skipped and the job succeeds', async () => {
  const { worker, job, claim } = await deployJob({ ...BLOCK, onTimeout: 'skip' });
  await db.finish(worker, await claim('build'), 'success');
  await pool.query(
    `update tasks set block_deadline = now() - interval '1 second' where job_id = $1 and name = 'approve'`,
    [job.id],
  );
  await sweep(pool);
  const tasks = await db.tasksOf(job.id);
  assert.equal(tasks.approve?.state, 'skipped');
  assert.equal(tasks.deploy?.state, 'skipped');
  assert.equal(await db.jobState(job.id), 'success');
});

test('cancelling a job cancels its blocked task, and a rerun blocks again', async () => {
  const { worker, job, claim } = await deployJob();
  await db.finish(worker, await claim('build'), 'success');
  await cancelJob(pool, job.id);
  const tasks = await db.tasksOf(job.id);
  assert.equal(tasks.approve?.state, 'cancelled');
  await assert.rejects(
    unblockTask(pool, job.id, 'approve', { reason: 'x' }, 'admin'),
    ConflictError,
  );
  const rerun = await rerunJob(pool, job.id, true);
  const again = await db.tasksOf(rerun.job.id);
  assert.equal(again.build?.state, 'success', 'kept');
  assert.equal(again.approve?.state, 'blocked', 'blocked again, its needs kept');
  assert.deepEqual(again.approve?.block, BLOCK);
});

test('a block step without needs starts blocked', async () => {
  const { job } = await db.runningJob([
    spec('gate', { script: [], block: BLOCK, outputs: ['reason', 'region'] }),
  ]);
  const tasks = await db.tasksOf(job.id);
  assert.equal(tasks.gate?.state, 'blocked');
  assert.ok(tasks.gate?.block_deadline instanceof Date);
});
