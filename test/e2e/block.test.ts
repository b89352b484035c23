// Block steps through the HTTP API (issue #30): POST
// /v1/jobs/{id}/tasks/{name}/unblock as the contract states it (200 {task};
// 409 unless blocked; 400 naming a missing or invalid field; 404; 401 without
// the admin token), and an untrusted job that stays untrusted once unblocked.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { githubPullRequest } from '../forge/fixtures/github.ts';
import {
  claimTask,
  type Json,
  pushRunning,
  sendWebhook,
  startE2E,
  twoPools,
  waitForJob,
} from './calls.ts';
import { pipeline, sha } from './payloads.ts';

const REPO = 'acme/blocks';
const e2e = await startE2E(import.meta.filename, {
  projects: {
    project: {
      forge: 'github',
      id: 'blocks',
      repo: REPO,
      cancel_superseded: false,
      fork_pull_requests: 'run',
    },
  },
});
const { stack } = e2e;
const { project } = e2e.projects;

const TASKS = `  approve:
    block:
      prompt: "Ship it?"
      fields:
        - {name: reason, type: text, required: true}
        - {name: region, type: select, options: [eu, us]}
  ship:
    needs: [approve]
    script: [ship]
`;

const unblock = (jobId: string, task: string, body: unknown, token = stack.adminToken) =>
  stack.call('POST', `/v1/jobs/${jobId}/tasks/${encodeURIComponent(task)}/unblock`, {
    token,
    body,
  });

async function blockedJob(label: string): Promise<string> {
  const jobId = await pushRunning(e2e, { repo: REPO, secret: project.secret }, label, TASKS);
  await waitForJob(stack, jobId, (v) => v.tasks[0]?.state === 'blocked');
  return jobId;
}

test('unblock answers 200 with the task, succeeded, its fields as outputs and who unblocked it', async () => {
  const jobId = await blockedJob('api-ok');
  const res = await unblock(jobId, 'approve', { fields: { reason: 'ok', region: 'us' } });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.task.name, 'approve');
  assert.equal(res.body.task.state, 'success');
  assert.equal(res.body.task.unblocked_by, 'admin token');
  assert.deepEqual(res.body.task.outputs, { reason: 'ok', region: 'us' });
  const view = await waitForJob(stack, jobId, (v) => v.tasks[1]?.state === 'queued');
  assert.equal(view.job.state, 'running');
});

test('unblock refuses: 400 naming the field, 409 unless blocked, 404 for no such task, 401 without the token', async () => {
  const jobId = await blockedJob('api-refusals');
  const missing = await unblock(jobId, 'approve', { fields: { region: 'eu' } });
  assert.equal(missing.status, 400, missing.text);
  assert.match(missing.body.error.message, /fields\.reason: is required/);
  const invalid = await unblock(jobId, 'approve', { fields: { reason: 'x', region: 'mars' } });
  assert.equal(invalid.status, 400);
  assert.match(invalid.body.error.message, /fields\.region: must be one of eu, us/);
  const unknownKey = await unblock(jobId, 'approve', { fieldz: {} });
  assert.equal(unknownKey.status, 400);
  assert.match(unknownKey.text, /fieldz/);
  const notBlocked = await unblock(jobId, 'ship', {});
  assert.equal(notBlocked.status, 409, notBlocked.text);
  assert.match(
    notBlocked.body.error.message,
    /task "ship" of job #\d+ is waiting; only a blocked task can be unblocked/,
  );
  const noTask = await unblock(jobId, 'nope', {});
  assert.equal(noTask.status, 404);
  const anonymous = await unblock(jobId, 'approve', { fields: { reason: 'x' } }, 'wrong');
  assert.equal(anonymous.status, 401);
  const view = await waitForJob(stack, jobId);
  assert.equal(view.tasks[0].state, 'blocked', 'nothing refused changed it');
});

test('cancelling the job cancels the blocked task; unblocking it then is a 409', async () => {
  const jobId = await blockedJob('api-cancel');
  const cancel = await stack.call('POST', `/v1/jobs/${jobId}/cancel`, { token: stack.adminToken });
  assert.equal(cancel.status, 200, cancel.text);
  const view = await waitForJob(stack, jobId, (v) => v.job.state === 'cancelled');
  assert.deepEqual(
    view.tasks.map((t: Json) => t.state),
    ['cancelled', 'cancelled'],
  );
  assert.equal((await unblock(jobId, 'approve', { fields: { reason: 'x' } })).status, 409);
});

test("unblocking never makes an untrusted job trusted: a fork's pull request stays on untrusted workers", async () => {
  const head = sha('fork-block');
  e2e.fake.setFile(REPO, head, pipeline('fork-block', TASKS));
  const hook = await sendWebhook(
    stack,
    'github',
    'pull_request',
    githubPullRequest('opened', { repo: REPO, headSha: head, fromFork: true }),
    { secret: project.secret },
  );
  assert.equal(hook.status, 202, hook.text);
  const jobId = hook.body.job_id;
  const blocked = await waitForJob(stack, jobId, (v) => v.tasks[0]?.state === 'blocked');
  assert.equal(blocked.job.trusted, false);
  const res = await unblock(jobId, 'approve', { fields: { reason: 'looks fine' } });
  assert.equal(res.status, 200, res.text);
  const view = await waitForJob(stack, jobId, (v) => v.tasks[1]?.state === 'queued');
  assert.equal(view.job.trusted, false);
  // A trusted worker with the label gets nothing; an untrusted one gets the task.
  const pools = await twoPools(stack, 'fork-block');
  const none = await stack.call('POST', '/v1/runner/claim', { token: pools.trusted, body: {} });
  assert.equal(none.status, 204);
  const task = await claimTask(stack, pools.untrusted);
  assert.equal(task.name, 'ship');
  assert.equal(task.trusted, false);
});
