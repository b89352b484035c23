import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';
import { sweep } from '../../lib/scheduler/index.ts';
import { githubPush } from '../forge/fixtures/github.ts';
import { assertError } from './assertions.ts';
import {
  claim,
  claimTask,
  complete,
  createWorker,
  deliverRunning,
  getJob,
  heartbeat,
  type Json,
  startE2E,
  uploadLog,
} from './calls.ts';
import { pipeline, sha } from './payloads.ts';

const REPO = 'acme/leases';
const {
  fake,
  stack,
  projects: { project },
} = await startE2E(import.meta.filename, {
  projects: { project: { forge: 'github', id: 'leases', repo: REPO, cancel_superseded: false } },
});

/** Pushes `tasks` (labelled `label`) on a branch of its own and waits for the job to run. */
async function runningJob(label: string, tasks: string): Promise<string> {
  const commit = sha(label);
  fake.setFile(REPO, commit, pipeline(label, tasks));
  const { hook } = await deliverRunning(
    stack,
    'github',
    'push',
    githubPush(REPO, commit, { ref: `refs/heads/${label}` }),
    project.secret,
  );
  return hook.body.job_id;
}

test('a cancel through the API reaches the runner on its next heartbeat, and its completion is cancelled', async () => {
  const label = 'cancel-api';
  const jobId = await runningJob(
    label,
    '  a:\n    script: [make a]\n  b:\n    script: [make b]\n  c:\n    needs: [a]\n    script: [make c]\n',
  );
  const { token } = await createWorker(stack, [label]);
  const a = await claimTask(stack, token);
  const b = await claimTask(stack, token);
  assert.deepEqual([a.name, b.name], ['a', 'b']);
  assert.equal((await heartbeat(stack, token, a.id, a.lease_id)).body.cancel, false);

  const cancel = await stack.call('POST', `/v1/jobs/${jobId}/cancel`, { token: stack.adminToken });
  assert.equal(cancel.status, 200, cancel.text);
  assert.equal(cancel.body.job.id, jobId);
  assert.equal(cancel.body.job.state, 'cancelled');
  assert.notEqual(cancel.body.job.finished_at, null);

  const beat = await heartbeat(stack, token, a.id, a.lease_id);
  assert.equal(beat.status, 200, beat.text);
  assert.equal(beat.body.cancel, true);

  const stopped = await complete(stack, token, a.id, {
    lease_id: a.lease_id,
    outcome: 'cancelled',
    exit_code: 143,
  });
  assert.equal(stopped.status, 200, stopped.text);
  assert.equal(stopped.body.state, 'cancelled');
  assert.equal(stopped.body.job_state, null, 'the cancel settled the job, not this completion');
  // A runner that finished anyway and reports success is still cancelled.
  const late = await complete(stack, token, b.id, { lease_id: b.lease_id, outcome: 'success' });
  assert.equal(late.status, 200, late.text);
  assert.equal(late.body.state, 'cancelled');

  assert.equal((await claim(stack, token)).status, 204, 'nothing of a cancelled job is claimable');
  const view = await getJob(stack, jobId);
  assert.equal(view.job.state, 'cancelled');
  assert.deepEqual(
    view.tasks.map((t: Json) => [t.name, t.state]),
    [
      ['a', 'cancelled'],
      ['b', 'cancelled'],
      ['c', 'cancelled'],
    ],
  );
  // Cancelling again answers the job as it is.
  const again = await stack.call('POST', `/v1/jobs/${jobId}/cancel`, { token: stack.adminToken });
  assert.equal(again.status, 200);
  assert.equal(again.body.job.state, 'cancelled');
  assert.equal(again.body.job.finished_at, cancel.body.job.finished_at);
});

test('a success reported twice under the same lease answers the same state; only the first settles the job', async () => {
  const label = 'repeat-success';
  const jobId = await runningJob(label, '  a:\n    script: [make]\n');
  const { token } = await createWorker(stack, [label]);
  const a = await claimTask(stack, token);
  const body = { lease_id: a.lease_id, outcome: 'success', outputs: {} };
  const first = await complete(stack, token, a.id, body);
  assert.equal(first.status, 200, first.text);
  assert.deepEqual(first.body, { state: 'success', job_state: 'success' });
  // The runner lost the answer and sends it again: the one-statement success
  // no longer applies, and the transaction recognises the repeat.
  const again = await complete(stack, token, a.id, body);
  assert.equal(again.status, 200, again.text);
  assert.deepEqual(again.body, { state: 'success', job_state: null });
  // The same report from another worker is not a repeat.
  const other = await createWorker(stack, [label]);
  assertError(await complete(stack, other.token, a.id, body), 409, 'conflict');
  assert.equal((await getJob(stack, jobId)).job.state, 'success');
});

test('cancelling a finished job leaves it as it was; an unknown job is a 404', async () => {
  const label = 'cancel-finished';
  const jobId = await runningJob(label, '  a:\n    script: [make]\n');
  const { token } = await createWorker(stack, [label]);
  const a = await claimTask(stack, token);
  const done = await complete(stack, token, a.id, { lease_id: a.lease_id, outcome: 'success' });
  assert.equal(done.body.job_state, 'success');
  const res = await stack.call('POST', `/v1/jobs/${jobId}/cancel`, { token: stack.adminToken });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.job.state, 'success');
  assertError(
    await stack.call('POST', `/v1/jobs/${randomUUID()}/cancel`, { token: stack.adminToken }),
    404,
    'not_found',
  );
});

test('after a lease expires and the task is claimed again, the first lease_id is a 409 on every runner route', async () => {
  const label = 'stale-lease';
  const jobId = await runningJob(label, '  a:\n    script: [make]\n');
  const first = await createWorker(stack, [label], 'first');
  const second = await createWorker(stack, [label], 'second');
  const one = await claimTask(stack, first.token);
  assert.equal(one.attempt, 1);
  const logged = await uploadLog(stack, first.token, one.id, {
    lease_id: one.lease_id,
    offset: 0,
    data: 'attempt one\n',
  });
  assert.equal(logged.status, 200, logged.text);

  // The first runner vanishes: its lease runs out and the sweep requeues the task.
  await stack.context.pool.query(
    `update tasks set lease_expires_at = now() - interval '1 second' where id = $1`,
    [one.id],
  );
  const swept = await sweep(stack.context.pool);
  assert.equal(swept.leases_expired, 1);
  assert.equal(swept.tasks_requeued, 1);
  const requeued = await getJob(stack, jobId);
  assert.equal(requeued.tasks[0].state, 'queued');

  const two = await claimTask(stack, second.token);
  assert.equal(two.id, one.id);
  assert.equal(two.attempt, 2);
  assert.notEqual(two.lease_id, one.lease_id);

  const stale = [
    await heartbeat(stack, first.token, one.id, one.lease_id),
    await uploadLog(stack, first.token, one.id, {
      lease_id: one.lease_id,
      offset: 12,
      data: 'still here\n',
    }),
    await complete(stack, first.token, one.id, { lease_id: one.lease_id, outcome: 'success' }),
  ];
  for (const res of stale) assertError(res, 409, 'conflict');

  // The current lease held by another worker is a 409 too.
  const foreign = [
    await heartbeat(stack, first.token, two.id, two.lease_id),
    await uploadLog(stack, first.token, two.id, { lease_id: two.lease_id, offset: 0, data: 'x' }),
    await complete(stack, first.token, two.id, { lease_id: two.lease_id, outcome: 'failed' }),
  ];
  for (const res of foreign) assertError(res, 409, 'conflict');

  // The current attempt goes on undisturbed.
  assert.equal((await heartbeat(stack, second.token, two.id, two.lease_id)).status, 200);
  const log2 = await uploadLog(stack, second.token, two.id, {
    lease_id: two.lease_id,
    offset: 0,
    data: 'attempt two\n',
  });
  assert.equal(log2.status, 200, log2.text);
  assert.equal(log2.body.size, 12, 'offsets count per attempt');
  const done = await complete(stack, second.token, two.id, {
    lease_id: two.lease_id,
    outcome: 'success',
  });
  assert.deepEqual(done.body, { state: 'success', job_state: 'success' });

  // Each attempt keeps its own log; the latest is the default.
  const latest = await stack.call('GET', `/v1/tasks/${one.id}/log`, { token: stack.adminToken });
  assert.equal(latest.text, 'attempt two\n');
  const earlier = await stack.call('GET', `/v1/tasks/${one.id}/log?attempt=1`, {
    token: stack.adminToken,
  });
  assert.equal(earlier.status, 200);
  assert.equal(earlier.text, 'attempt one\n');
  assertError(
    await stack.call('GET', `/v1/tasks/${one.id}/log?attempt=3`, { token: stack.adminToken }),
    404,
    'not_found',
  );
  const view = await getJob(stack, jobId);
  assert.equal(view.tasks[0].attempt, 2);
});

test('an unknown task id, or one that is not a UUID, is a 404 on every runner route', async () => {
  const { token } = await createWorker(stack, ['unknown-task']);
  for (const id of [randomUUID(), 'not-a-uuid', '12345']) {
    const lease = randomUUID();
    const answers = [
      await heartbeat(stack, token, id, lease),
      await uploadLog(stack, token, id, { lease_id: lease, offset: 0, data: 'x' }),
      await complete(stack, token, id, { lease_id: lease, outcome: 'success' }),
    ];
    for (const res of answers) assertError(res, 404, 'not_found');
  }
  assertError(
    await stack.call('GET', `/v1/tasks/${randomUUID()}/log`, { token: stack.adminToken }),
    404,
    'not_found',
  );
});

test('a transient failure with attempts left queues the task again; the last attempt fails it', async () => {
  const label = 'transient';
  const jobId = await runningJob(
    label,
    '  flaky:\n    retries: 1\n    script: [make]\n  after:\n    needs: [flaky]\n    script: [make]\n',
  );
  const { token } = await createWorker(stack, [label]);
  const one = await claimTask(stack, token);
  assert.equal(one.max_attempts, 2);
  const requeued = await complete(stack, token, one.id, {
    lease_id: one.lease_id,
    outcome: 'failed',
    transient: true,
    error: 'clone failed: connection reset',
  });
  assert.deepEqual(requeued.body, { state: 'queued', job_state: null });
  const two = await claimTask(stack, token);
  assert.equal(two.id, one.id);
  assert.equal(two.attempt, 2);
  const failed = await complete(stack, token, two.id, {
    lease_id: two.lease_id,
    outcome: 'failed',
    transient: true,
    exit_code: 128,
  });
  assert.deepEqual(failed.body, { state: 'failed', job_state: 'failed' });
  const view = await getJob(stack, jobId);
  assert.equal(view.job.state, 'failed');
  assert.deepEqual(
    view.tasks.map((t: Json) => [t.name, t.state]),
    [
      ['flaky', 'failed'],
      ['after', 'skipped'],
    ],
  );
  // A different outcome under the finished lease is not a repeat: 409.
  assertError(
    await complete(stack, token, two.id, { lease_id: two.lease_id, outcome: 'success' }),
    409,
    'conflict',
  );
});

test('claim labels narrow the worker’s own; a task needs a worker with all of its labels', async () => {
  const jobId = await runningJob(
    'claim-labels',
    '  gpu:\n    labels: [claim-labels, gpu]\n    script: [make]\n',
  );
  const plain = await createWorker(stack, ['claim-labels']);
  const big = await createWorker(stack, ['claim-labels', 'gpu']);
  assert.equal((await claim(stack, plain.token)).status, 204, 'a worker without gpu gets nothing');
  assert.equal(
    (await claim(stack, big.token, { labels: ['claim-labels'] })).status,
    204,
    'narrowed to claim-labels, the gpu task does not fit',
  );
  const task = await claimTask(stack, big.token, { labels: ['gpu', 'claim-labels'] });
  assert.equal(task.job_id, jobId);
});

test('two runners claiming the only task at once: one gets it, the other 204', async () => {
  await runningJob('race', '  only:\n    script: [make]\n');
  const runners = await Promise.all(
    [1, 2, 3, 4].map((i) => createWorker(stack, ['race'], `r${i}`)),
  );
  const answers = await Promise.all(runners.map((r) => claim(stack, r.token)));
  assert.deepEqual(answers.map((a) => a.status).sort(), [200, 204, 204, 204]);
});
