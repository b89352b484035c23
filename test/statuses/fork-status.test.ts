// An untrusted job's statuses never stand for a trusted job's (issue #28): a
// fork's pull request may have a commit of main as its head, and the forge
// keeps one status per commit and context. Untrusted jobs report under
// `conductor (untrusted)`, and the outbox orders rows per commit and context,
// so a fork's rows neither replace main's status on the forge nor supersede
// main's rows still waiting in the outbox.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runSweep } from '../../lib/app/sweep.ts';
import { statusContext } from '../../lib/forge/statuses.ts';
import { createWorker, getJob, sendWebhook } from '../e2e/calls.ts';
import { giteaPullRequest } from '../forge/fixtures/gitea.ts';
import { githubPullRequest } from '../forge/fixtures/github.ts';
import {
  adminCall,
  makeDue,
  makeProject,
  ONE_TASK,
  outbox,
  pipelineFile,
  projectOn,
  push,
  pushSettled,
  runTasks,
  type StatusProject,
  seen,
  statusesSettled,
  statusStack,
  sweepAllDue,
  waitUntil,
  whileDown,
} from './support.ts';

const { fake, stack } = await statusStack(import.meta.filename);

/** What the forge accepted for `commit` under `context`, as `state: description`. */
const under = (commit: string, context: string) =>
  seen(fake.acceptedFor(commit).filter((post) => post.body.context === context));

/** Sends a pull request from the fork `mallory/<id>` whose head is `commit`; answers its job id. */
async function forkPullRequest(p: StatusProject, commit: string, number: number) {
  const opts = { repo: p.repo, number, headSha: commit, headRepo: `mallory/${p.id}` };
  const payload =
    p.forge === 'github' ? githubPullRequest('opened', opts) : giteaPullRequest('opened', opts);
  const hook = await sendWebhook(stack, p.forge, 'pull_request', payload, { secret: p.secret });
  assert.equal(hook.status, 202, hook.text);
  const jobId: string = hook.body.job_id;
  const { job } = await getJob(stack, jobId);
  assert.equal(job.trusted, false);
  assert.equal(job.state, 'blocked');
  return jobId;
}

test('github: a fork pull request on main\'s green commit reports as "conductor (untrusted)", and "conductor" stays success through its approval and failure', async () => {
  const { p, commit } = await projectOn(stack, fake, 'github', 'fork-on-main', ONE_TASK);
  const { jobId: main } = await pushSettled(stack, fake, p, commit);
  assert.deepEqual(await runTasks(stack, p), ['success']);
  await statusesSettled(stack, fake, main, commit, 2);
  assert.deepEqual(under(commit, 'conductor'), ['pending: running 1 task', 'success: 1 passed']);

  const fork = await forkPullRequest(p, commit, 9);
  await statusesSettled(stack, fake, fork, commit, 3);
  assert.deepEqual(under(commit, 'conductor (untrusted)'), ['pending: waiting for approval']);
  assert.deepEqual(under(commit, 'conductor').at(-1), 'success: 1 passed');

  // Approved, it runs on an untrusted worker and fails: still its own context.
  const { token } = await createWorker(stack, [p.label], `untrusted-${p.id}`, { untrusted: true });
  await adminCall(stack, 'POST', `/v1/jobs/${fork}/approve`, 200);
  await statusesSettled(stack, fake, fork, commit, 4);
  assert.deepEqual(await runTasks(stack, { ...p, runner: token }, { check: 'failed' }), ['failed']);
  await statusesSettled(stack, fake, fork, commit, 5);
  await sweepAllDue(stack);

  assert.deepEqual(under(commit, 'conductor'), ['pending: running 1 task', 'success: 1 passed']);
  assert.deepEqual(under(commit, 'conductor (untrusted)'), [
    'pending: waiting for approval',
    'pending: running 1 task',
    'failure: 0 passed, 1 failed',
  ]);
  assert.equal(fake.acceptedFor(commit).length, 5, 'nothing else was posted');
});

// Guards the outbox's order: rows were ordered per commit, so the fork's
// "waiting for approval", written after main's success while the forge was
// down, superseded it, and the commit showed pending where main had passed.
test("gitea: main's success held up by an outage is still posted after a fork's pull request on the same commit, each under its own context", async () => {
  const { p, commit } = await projectOn(stack, fake, 'gitea', 'fork-outage', ONE_TASK);
  const { jobId: main } = await pushSettled(stack, fake, p, commit);
  const fork = await whileDown(fake, 503, async () => {
    assert.deepEqual(await runTasks(stack, p), ['success']);
    return forkPullRequest(p, commit, 4);
  });
  assert.deepEqual(under(commit, 'conductor'), ['pending: running 1 task']);

  await sweepAllDue(stack);
  assert.deepEqual(under(commit, 'conductor'), ['pending: running 1 task', 'success: 1 passed']);
  assert.deepEqual(under(commit, 'conductor (untrusted)'), ['pending: waiting for approval']);
  for (const job of [main, fork]) {
    const open = (await outbox(stack, job)).filter((r) => r.result === null);
    assert.deepEqual(open, [], 'no row is left open');
  }
  assert.equal(
    (await outbox(stack, main)).find((r) => r.state === 'success')?.result,
    'delivered',
    "main's success was delivered, not superseded",
  );
});

test('gitea: a pull request from the repository itself posts nothing while Gitea has yet to confirm its people, then reports under the context the answer gives', async () => {
  const p = await makeProject(stack, fake, 'gitea', 'unconfirmed');
  const commit = 'c0ffee'.padEnd(40, '1');
  fake.setFile(p.repo, commit, pipelineFile(p.label, ONE_TASK));
  fake.files.down(503);
  let jobId: string;
  try {
    const hook = await sendWebhook(
      stack,
      'gitea',
      'pull_request',
      giteaPullRequest('opened', { repo: p.repo, number: 5, headSha: commit }),
      { secret: p.secret },
    );
    assert.equal(hook.status, 202, hook.text);
    jobId = hook.body.job_id;
    await waitUntil('the compile noted that Gitea did not answer', async () => {
      const { job } = await getJob(stack, jobId);
      return job.error != null;
    });
    const { job } = await getJob(stack, jobId);
    assert.equal(job.state, 'pending');
    assert.equal(job.trusted, false);
    // Its creation status is due, but the job has no context yet.
    await makeDue(stack, jobId);
    const summary = await runSweep(stack.context);
    assert.equal(summary.statuses_delivered, 0);
    assert.equal(fake.statusesFor(commit).length, 0);
  } finally {
    fake.files.up();
  }

  const author = giteaPullRequest('opened').pull_request.user.login;
  fake.files.setPermission(p.repo, author, 'write');
  await runSweep(stack.context, { compileStaleS: 0 });
  await waitUntil('the job runs, trusted', async () => {
    const { job } = await getJob(stack, jobId);
    return job.state === 'running' && job.trusted === true;
  });
  await statusesSettled(stack, fake, jobId, commit, 1);
  await sweepAllDue(stack);
  assert.deepEqual(under(commit, 'conductor'), ['pending: running 1 task']);
  assert.equal(fake.statusesFor(commit).length, 1, 'nothing under another context');
});

test('the untrusted context is the trusted one with " (untrusted)" after the pipeline name', () => {
  assert.equal(statusContext(null, true), 'conductor');
  assert.equal(statusContext('backend', true), 'conductor/backend');
  assert.equal(statusContext(null, false), 'conductor (untrusted)');
  assert.equal(statusContext('backend', false), 'conductor/backend (untrusted)');
});

test('a push of a commit whose fork pull request waits for approval reports under "conductor" beside it', async () => {
  const { p, commit } = await projectOn(stack, fake, 'github', 'push-after-fork', ONE_TASK);
  const fork = await forkPullRequest(p, commit, 12);
  await statusesSettled(stack, fake, fork, commit, 1);
  const main = await push(stack, p, commit);
  await statusesSettled(stack, fake, main, commit, 2);
  assert.deepEqual(await runTasks(stack, p), ['success']);
  await statusesSettled(stack, fake, main, commit, 3);
  await sweepAllDue(stack);
  assert.deepEqual(under(commit, 'conductor (untrusted)'), ['pending: waiting for approval']);
  assert.deepEqual(under(commit, 'conductor'), ['pending: running 1 task', 'success: 1 passed']);
  assert.equal((await getJob(stack, fork)).job.state, 'blocked');
});
