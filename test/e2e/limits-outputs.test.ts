// Outputs (docs/limits.md): only declared outputs are accepted, at most 1 MiB
// of them per task, at most 1 MiB inherited by a task from the tasks it
// needs, and secret values in them are masked before anyone sees them.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { assertBadRequest, assertError } from './assertions.ts';
import {
  claimTask,
  complete,
  createWorker,
  getJob,
  pushRunning,
  putSecret,
  startE2E,
} from './calls.ts';

const REPO = 'acme/outputs';
const SECRET = 's3cr3t-hunter2-value';
const {
  fake,
  stack,
  projects: { project },
} = await startE2E(import.meta.filename, {
  projects: { project: { forge: 'github', id: 'outputs', repo: REPO, cancel_superseded: false } },
});
await putSecret(stack, 'outputs', 'DEPLOY_KEY', SECRET);

/** A running job of `tasks` (all labelled `label`), and a worker that can claim them. */
async function running(label: string, tasks: string) {
  const jobId = await pushRunning(
    { fake, stack },
    { repo: REPO, secret: project.secret },
    label,
    tasks,
  );
  const { token } = await createWorker(stack, [label]);
  return { jobId, token };
}

function taskNamed(view: Record<string, unknown>, name: string) {
  return (view.tasks as Array<Record<string, unknown>>).find((t) => t.name === name)!;
}

test('an output the task does not declare is refused with a 400 naming it, and nothing is recorded', async () => {
  const { jobId, token } = await running(
    'undeclared',
    '  build:\n    outputs: [version]\n    script: [make]\n',
  );
  const task = await claimTask(stack, token);
  const refused = await complete(stack, token, task.id, {
    lease_id: task.lease_id,
    outcome: 'success',
    outputs: { version: '1.2.3', leak: 'x' },
  });
  assertBadRequest(refused, 'outputs.leak');
  assert.match(
    refused.body.error.message,
    /output "leak" is not declared by task "build" \(it declares version\)/,
  );
  assert.equal(taskNamed(await getJob(stack, jobId), 'build').state, 'running');

  const done = await complete(stack, token, task.id, {
    lease_id: task.lease_id,
    outcome: 'success',
    outputs: { version: '1.2.3' },
  });
  assert.deepEqual(done.body, { state: 'success', job_state: 'success' });
  assert.deepEqual(taskNamed(await getJob(stack, jobId), 'build').outputs, { version: '1.2.3' });
});

test('a bad token is a 401 even when the outputs would be refused', async () => {
  const { token } = await running('undeclared-401', '  build:\n    script: [make]\n');
  const task = await claimTask(stack, token);
  const res = await complete(stack, 'cw_not-a-token', task.id, {
    lease_id: task.lease_id,
    outcome: 'success',
    outputs: { leak: 'x' },
  });
  assertError(res, 401, 'unauthorized');
});

test('outputs over 1 MiB per task are refused with a 413 naming the limit', async () => {
  const { token } = await running('heavy', '  build:\n    outputs: [a, b]\n    script: [make]\n');
  const task = await claimTask(stack, token);
  const half = 'x'.repeat(600 * 1024);
  const res = await complete(stack, token, task.id, {
    lease_id: task.lease_id,
    outcome: 'success',
    outputs: { a: half, b: half },
  });
  assertError(res, 413, 'payload_too_large');
  assert.match(res.body.error.message, /at most 1048576 bytes \(1 MiB\) of outputs per task/);
});

test('a task that would inherit more than 1 MiB of outputs fails at promotion, naming the producers', async () => {
  const { jobId, token } = await running(
    'inherit',
    `  left:
    outputs: [blob]
    script: [make]
  right:
    outputs: [blob]
    script: [make]
  small:
    outputs: [v]
    script: [make]
  merge:
    needs: [left, right, small]
    script: [make]
  after:
    needs: [merge]
    script: [make]
`,
  );
  const blob = 'y'.repeat(600 * 1024);
  for (let i = 0; i < 3; i++) {
    const task = await claimTask(stack, token);
    const outputs = task.name === 'small' ? { v: '1' } : { blob };
    const res = await complete(stack, token, task.id, {
      lease_id: task.lease_id,
      outcome: 'success',
      outputs,
    });
    assert.equal(res.status, 200, res.text);
  }
  const view = await getJob(stack, jobId);
  const merge = taskNamed(view, 'merge');
  assert.equal(merge.state, 'failed');
  assert.match(
    String(merge.error),
    /^needs \d+ bytes of outputs from "left" \(\d+ bytes\), "right" \(\d+ bytes\), "small" \(\d+ bytes\); at most 1048576 bytes \(1 MiB\) of inherited outputs per task are allowed$/,
  );
  assert.equal(taskNamed(view, 'after').state, 'skipped');
  assert.equal(view.job.state, 'failed');
  assert.equal((await stack.call('POST', '/v1/runner/claim', { token, body: {} })).status, 204);
});

test('a secret value in an output is masked in the job view and in what the tasks that need it receive', async () => {
  const { jobId, token } = await running(
    'masked',
    `  deploy:
    secrets: [DEPLOY_KEY]
    outputs: [url, encoded]
    script: [make]
  notify:
    needs: [deploy]
    script: [make]
`,
  );
  const task = await claimTask(stack, token);
  assert.equal(task.secrets.DEPLOY_KEY, SECRET);
  const done = await complete(stack, token, task.id, {
    lease_id: task.lease_id,
    outcome: 'success',
    outputs: {
      url: `https://user:${SECRET}@deploy.example/app`,
      encoded: `token=${encodeURIComponent(SECRET).replace(/-/g, '%2D')}`,
    },
  });
  assert.equal(done.status, 200, done.text);
  const res = await stack.call('GET', `/v1/jobs/${jobId}`, { token: stack.adminToken });
  assert.ok(!res.text.includes(SECRET), res.text);
  assert.ok(!res.text.includes('%2D'), res.text);
  assert.deepEqual(taskNamed(res.body, 'deploy').outputs, {
    url: 'https://user:***@deploy.example/app',
    encoded: 'token=***',
  });
  const next = await claimTask(stack, token);
  assert.equal(next.name, 'notify');
  assert.deepEqual(next.needs_outputs, {
    deploy: { url: 'https://user:***@deploy.example/app', encoded: 'token=***' },
  });
});
