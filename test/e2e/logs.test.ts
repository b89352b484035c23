import assert from 'node:assert/strict';
import { test } from 'node:test';
import { githubPullRequest, githubPush } from '../forge/fixtures/github.ts';
import { assertError } from './assertions.ts';
import {
  claimTask,
  complete,
  createWorker,
  deliverRunning,
  heartbeat,
  putSecret,
  sendWebhook,
  startE2E,
  uploadLog,
  waitForJob,
} from './calls.ts';
import { pipeline, sha } from './payloads.ts';

const LOG_LIMIT = 4096;
const REPO = 'acme/logs';
const SECRET = 'correct-horse-battery-staple';
const {
  fake,
  stack,
  projects: { project },
} = await startE2E(import.meta.filename, {
  env: { CONDUCTOR_LOG_MAX_BYTES: String(LOG_LIMIT) },
  projects: { project: { forge: 'github', id: 'logs', repo: REPO, cancel_superseded: false } },
});
await putSecret(stack, 'logs', 'PASSPHRASE', SECRET);

/** A running job of one task labelled `label` that lists the secret; answers the claimed task and the runner's token. */
async function claimed(label: string) {
  const commit = sha(label);
  fake.setFile(
    REPO,
    commit,
    pipeline(label, '  a:\n    secrets: [PASSPHRASE]\n    script: [make]\n'),
  );
  await deliverRunning(
    stack,
    'github',
    'push',
    githubPush(REPO, commit, { ref: `refs/heads/${label}` }),
    project.secret,
  );
  const { token } = await createWorker(stack, [label]);
  return { task: await claimTask(stack, token), token };
}

async function readLog(taskId: string, query = ''): Promise<string> {
  const res = await stack.call('GET', `/v1/tasks/${taskId}/log${query}`, {
    token: stack.adminToken,
  });
  assert.equal(res.status, 200, res.text);
  return res.text;
}

test('a chunk that overlaps the stored end stores only its new bytes', async () => {
  const { task, token } = await claimed('overlap');
  const send = (offset: number, data: string) =>
    uploadLog(stack, token, task.id, { lease_id: task.lease_id, offset, data });
  assert.equal((await send(0, 'hello ')).body.size, 6);
  const overlap = await send(3, 'lo wörld\n');
  assert.equal(overlap.status, 200, overlap.text);
  assert.equal(overlap.body.size, 3 + Buffer.byteLength('lo wörld\n'));
  // A chunk wholly inside what is stored changes nothing.
  assert.equal((await send(0, 'hel')).body.size, overlap.body.size);
  assert.equal(await readLog(task.id), 'hello wörld\n');
  const res = await stack.call('GET', `/v1/tasks/${task.id}/log`, { token: stack.adminToken });
  assert.equal(res.headers.get('x-log-size'), String(overlap.body.size));
  assert.equal(res.headers.get('x-log-attempt'), '1');
});

test('reading from the offset the last read ended at returns only the new text', async () => {
  const { task, token } = await claimed('tail');
  await uploadLog(stack, token, task.id, { lease_id: task.lease_id, offset: 0, data: 'one\n' });
  const first = await stack.call('GET', `/v1/tasks/${task.id}/log`, { token: stack.adminToken });
  const seen = Number(first.headers.get('x-log-size'));
  assert.equal(seen, 4);
  await uploadLog(stack, token, task.id, { lease_id: task.lease_id, offset: 4, data: 'two\n' });
  assert.equal(await readLog(task.id, `?offset=${seen}`), 'two\n');
});

test('a log over the per-task limit answers 413 and the task runs on', async () => {
  const { task, token } = await claimed('limit');
  const big = 'x'.repeat(LOG_LIMIT - 10);
  const first = await uploadLog(stack, token, task.id, {
    lease_id: task.lease_id,
    offset: 0,
    data: big,
  });
  assert.equal(first.status, 200, first.text);
  const over = await uploadLog(stack, token, task.id, {
    lease_id: task.lease_id,
    offset: big.length,
    data: 'y'.repeat(11),
  });
  assertError(over, 413, 'payload_too_large');
  assert.equal((await heartbeat(stack, token, task.id, task.lease_id)).status, 200);
  assert.equal((await readLog(task.id)).length, big.length, 'what fitted is kept');
  const done = await complete(stack, token, task.id, {
    lease_id: task.lease_id,
    outcome: 'success',
  });
  assert.deepEqual(done.body, { state: 'success', job_state: 'success' });
});

test('a chunk over 1 MiB answers 413', async () => {
  const { task, token } = await claimed('chunk');
  const res = await uploadLog(stack, token, task.id, {
    lease_id: task.lease_id,
    offset: 0,
    data: 'z'.repeat(1024 * 1024 + 1),
  });
  assertError(res, 413, 'payload_too_large');
});

test('logs of a finished task are refused with 409; a task never claimed has an empty log', async () => {
  const { task, token } = await claimed('finished');
  await complete(stack, token, task.id, {
    lease_id: task.lease_id,
    outcome: 'failed',
    exit_code: 1,
  });
  assertError(
    await uploadLog(stack, token, task.id, { lease_id: task.lease_id, offset: 0, data: 'late\n' }),
    409,
    'conflict',
  );

  const commit = sha('never-claimed');
  fake.setFile(REPO, commit, pipeline('never-claimed', '  a:\n    script: [make]\n'));
  const hook = await sendWebhook(
    stack,
    'github',
    'push',
    githubPush(REPO, commit, { ref: 'refs/heads/never' }),
    { secret: project.secret },
  );
  const view = await waitForJob(stack, hook.body.job_id);
  assert.equal(await readLog(view.tasks[0].id), '');
});

test('a fork pull request gets no secret value, so its log shows what it printed', async () => {
  const head = sha('fork-log');
  fake.setFile(
    REPO,
    head,
    pipeline('fork-log', '  a:\n    secrets: [PASSPHRASE]\n    script: [make]\n'),
  );
  const hook = await sendWebhook(
    stack,
    'github',
    'pull_request',
    githubPullRequest('opened', { repo: REPO, number: 9, headSha: head, headRepo: 'eve/logs' }),
    { secret: project.secret },
  );
  assert.equal(hook.status, 202, hook.text);
  // The fork's job waits for approval, and then runs only on an untrusted worker.
  const approved = await stack.call('POST', `/v1/jobs/${hook.body.job_id}/approve`, {
    token: stack.adminToken,
  });
  assert.equal(approved.status, 200, approved.text);
  await waitForJob(stack, hook.body.job_id);
  const { token } = await createWorker(stack, ['fork-log'], 'fork-log', { untrusted: true });
  const task = await claimTask(stack, token);
  assert.deepEqual(task.secrets, {});
  await uploadLog(stack, token, task.id, {
    lease_id: task.lease_id,
    offset: 0,
    data: 'PASSPHRASE is empty\n',
  });
  assert.equal(await readLog(task.id), 'PASSPHRASE is empty\n');
});

test('a secret value split across two log chunks is still masked', async () => {
  const { task, token } = await claimed('split-secret');
  const text = `the key: ${SECRET}\n`;
  // A runner cuts its output into chunks wherever a buffer fills, here inside the secret.
  const cut = text.indexOf(SECRET) + 8;
  const parts = [text.slice(0, cut), text.slice(cut)];
  let offset = 0;
  for (const data of parts) {
    const res = await uploadLog(stack, token, task.id, { lease_id: task.lease_id, offset, data });
    assert.equal(res.status, 200, res.text);
    offset += Buffer.byteLength(data);
  }
  const stored = await readLog(task.id);
  assert.ok(!stored.includes(SECRET), `the secret was stored as sent: ${JSON.stringify(stored)}`);
  assert.equal(stored, 'the key: ***\n');
});

test('reading the log from an offset inside a chunk starts at that offset', async () => {
  const { task, token } = await claimed('mid-offset');
  await uploadLog(stack, token, task.id, { lease_id: task.lease_id, offset: 0, data: 'hello\n' });
  await uploadLog(stack, token, task.id, { lease_id: task.lease_id, offset: 6, data: 'world\n' });
  assert.equal(await readLog(task.id, '?offset=6'), 'world\n');
  assert.equal(await readLog(task.id, '?offset=3'), 'lo\nworld\n');
});

test('a secret value in the error a runner reports is masked in the job view', async () => {
  const { task, token } = await claimed('error-secret');
  assert.deepEqual(task.secrets, { PASSPHRASE: SECRET });
  const done = await complete(stack, token, task.id, {
    lease_id: task.lease_id,
    outcome: 'failed',
    exit_code: 1,
    error: `login failed for passphrase ${SECRET}`,
  });
  assert.equal(done.status, 200, done.text);
  const res = await stack.call('GET', `/v1/jobs/${task.job_id}`, { token: stack.adminToken });
  assert.equal(res.status, 200);
  assert.ok(
    !res.text.includes(SECRET),
    `GET /v1/jobs/{id} shows the secret: ${res.body.tasks[0].error}`,
  );
});
