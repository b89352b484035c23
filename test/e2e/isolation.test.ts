// One project's code never reaches another project's secrets (issue #28),
// through the HTTP API as a runner and an operator use it: a worker scoped to
// a project, as the stolen token of a low-value project's build would be used
// to claim the high-value project's deploy; an ephemeral worker's one claim;
// the Idempotency-Key of a claim (#35); a completion with a bad token that
// reads nothing before its 401.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import pg from 'pg';
import { githubPush } from '../forge/fixtures/github.ts';
import {
  claim,
  claimTask,
  complete,
  deliverRunning,
  getJob,
  heartbeat,
  putSecret,
  startE2E,
} from './calls.ts';
import { pipeline, sha } from './payloads.ts';

const {
  fake,
  stack,
  projects: { low, high },
} = await startE2E(import.meta.filename, {
  projects: {
    low: { forge: 'github', id: 'low', repo: 'acme/low' },
    high: { forge: 'github', id: 'high', repo: 'acme/high' },
  },
});

async function worker(body: Record<string, unknown>) {
  return stack.call('POST', '/v1/workers', { token: stack.adminToken, body });
}

/** Pushes a pipeline of one task on `label` to a project, asserting its job runs. */
async function push(repo: string, secret: string, label: string, tasks: string, seed: string) {
  const head = sha(seed);
  fake.setFile(repo, head, pipeline(label, tasks));
  const { view } = await deliverRunning(
    stack,
    'github',
    'push',
    githubPush(repo, head, { ref: `refs/heads/${seed}` }),
    secret,
  );
  return view;
}

test("a worker scoped to its project cannot claim another project's deploy with its token; GET /v1/workers shows the scope", async () => {
  await putSecret(stack, 'high', 'DEPLOY_KEY', 'prod-key-do-not-leak');
  const deploy = await push(
    'acme/high',
    high.secret,
    'shared',
    '  deploy:\n    secrets: [DEPLOY_KEY]\n    script: [deploy]\n',
    'high-1',
  );
  const scoped = await worker({ name: 'low-runner', labels: ['shared'], projects: ['low'] });
  assert.equal(scoped.status, 201, scoped.text);
  assert.deepEqual(scoped.body.worker.projects, ['low']);
  assert.equal(scoped.body.worker.ephemeral, false);

  // The token a script of project low could steal from its runner.
  const stolen = scoped.body.token;
  assert.equal((await claim(stack, stolen)).status, 204);
  const view = await getJob(stack, deploy.job.id);
  assert.equal(view.tasks[0].state, 'queued');
  assert.equal(
    view.tasks[0].queue_reason,
    'no trusted worker with the labels shared may claim tasks of project high',
  );

  const build = await push(
    'acme/low',
    low.secret,
    'shared',
    '  build:\n    script: [make]\n',
    'low-1',
  );
  const own = await claimTask(stack, stolen);
  assert.equal(own.job_id, build.job.id);
  assert.equal(own.trusted, true);
  assert.deepEqual(own.secrets, {});

  const all = await worker({ name: 'everything', labels: ['shared'], projects: '*' });
  assert.equal(all.body.worker.projects, '*');
  const deployTask = await claimTask(stack, all.body.token);
  assert.equal(deployTask.job_id, deploy.job.id);
  assert.deepEqual(deployTask.secrets, { DEPLOY_KEY: 'prod-key-do-not-leak' });

  const listed = await stack.call('GET', '/v1/workers', { token: stack.adminToken });
  const byName = Object.fromEntries(listed.body.workers.map((w: { name: string }) => [w.name, w]));
  assert.deepEqual(byName['low-runner'].projects, ['low']);
  assert.equal(byName.everything.projects, '*');
});

test('POST /v1/workers refuses a project that does not exist, naming the field', async () => {
  const res = await worker({ name: 'x', labels: [], projects: ['low', 'nope'] });
  assert.equal(res.status, 400);
  assert.match(res.body.error.message, /projects\.1: project "nope" does not exist/);
  const empty = await worker({ name: 'x', labels: [], projects: [] });
  assert.equal(empty.status, 400);
  assert.match(empty.body.error.message, /projects/);
});

test('an ephemeral worker claims one task; its second claim answers 401, and its token stops when the attempt ends', async () => {
  await push(
    'acme/low',
    low.secret,
    'once',
    '  one:\n    script: [a]\n  two:\n    script: [b]\n',
    'low-eph',
  );
  const eph = await worker({ name: 'autoscaled', labels: ['once'], ephemeral: true });
  assert.equal(eph.body.worker.ephemeral, true);
  const token = eph.body.token;
  const task = await claimTask(stack, token);
  const second = await claim(stack, token);
  assert.equal(second.status, 401);
  assert.match(second.body.error.message, /one claim/);
  assert.equal((await heartbeat(stack, token, task.id, task.lease_id)).status, 200);
  const done = await complete(stack, token, task.id, {
    lease_id: task.lease_id,
    outcome: 'success',
  });
  assert.equal(done.status, 200, done.text);
  assert.equal((await heartbeat(stack, token, task.id, task.lease_id)).status, 401);
  assert.equal((await claim(stack, token)).status, 401);
});

test('a claim repeated with the same Idempotency-Key is answered the same task and lease; a key over 200 characters is a 400', async () => {
  await push(
    'acme/low',
    low.secret,
    'keyed',
    '  k:\n    script: [k]\n  l:\n    script: [l]\n',
    'low-key',
  );
  const w = await worker({ name: 'keyed', labels: ['keyed'] });
  const token = w.body.token;
  const headers = { 'idempotency-key': 'claim-7f3a' };
  const first = await stack.call('POST', '/v1/runner/claim', { token, body: {}, headers });
  const again = await stack.call('POST', '/v1/runner/claim', { token, body: {}, headers });
  assert.equal(first.status, 200);
  assert.equal(again.status, 200);
  assert.equal(again.body.task.id, first.body.task.id);
  assert.equal(again.body.task.lease_id, first.body.task.lease_id);
  assert.equal(again.body.task.attempt, 1);
  const other = await stack.call('POST', '/v1/runner/claim', {
    token,
    body: {},
    headers: { 'idempotency-key': 'claim-other' },
  });
  assert.notEqual(other.body.task.id, first.body.task.id);
  const long = await stack.call('POST', '/v1/runner/claim', {
    token,
    body: {},
    headers: { 'idempotency-key': 'k'.repeat(201) },
  });
  assert.equal(long.status, 400);
  assert.match(long.body.error.message, /Idempotency-Key/);
});

// Before #28 a completion with any bearer string read the task, opened the
// project's secrets and ran the masker before answering 401. With the
// projects and their secrets locked by this test (every statement that
// names either table waits), a completion that read them would wait; one that
// authenticates first answers 401 at once.
test('a completion with a bad token answers 401 without reading the task or the secrets', async () => {
  const view = await push(
    'acme/high',
    high.secret,
    'bad-token',
    '  t:\n    secrets: [DEPLOY_KEY]\n    outputs: [v]\n    script: [t]\n',
    'high-bad',
  );
  const w = await worker({ name: 'bad-token', labels: ['bad-token'], projects: ['high'] });
  const task = await claimTask(stack, w.body.token);
  assert.equal(task.job_id, view.job.id);
  const admin = new pg.Client({ connectionString: stack.context.config.DATABASE_URL });
  await admin.connect();
  try {
    await admin.query('begin');
    await admin.query('lock table project_secrets, projects in access exclusive mode');
    const res = await complete(stack, 'cw_not-a-token', task.id, {
      lease_id: task.lease_id,
      outcome: 'failed',
      error: 'x',
      outputs: { v: 'y' },
    });
    assert.equal(res.status, 401);
    await admin.query('rollback');
  } finally {
    await admin.end();
  }
  const ok = await complete(stack, w.body.token, task.id, {
    lease_id: task.lease_id,
    outcome: 'success',
    outputs: { v: 'prod-key-do-not-leak' },
  });
  assert.equal(ok.status, 200, ok.text);
  const after = await getJob(stack, view.job.id);
  assert.deepEqual(after.tasks[0].outputs, { v: '***' });
});
