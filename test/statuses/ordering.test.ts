// "A newer state is never overwritten by an older one arriving late", as the
// forge sees it: a forge keeps the latest status per commit and context, so
// what matters is the order in which the posts for one commit and context land.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runSweep } from '../../lib/sweeper.ts';
import { sha } from '../e2e/support.ts';
import { startFakeStatusForge } from '../helpers/fake-status-forge.ts';
import { testStack } from '../helpers/stack.ts';
import {
  makeProject,
  outboxIdle,
  pipelineFile,
  push,
  runTasks,
  seen,
  seenAnswered,
  statusesSettled,
} from './support.ts';

const fake = await startFakeStatusForge();
const stack = await testStack(import.meta.filename, { CONDUCTOR_GITHUB_API_URL: fake.url });

const ONE_TASK = '  check:\n    script: [make check]\n';

/** Runs every due row of every job, as sweeps do once backoffs have passed. */
async function sweepEverythingDue(): Promise<void> {
  await stack.context.pool.query(
    `update status_outbox set next_attempt_at = now() - interval '1 second' where result is null`,
  );
  await runSweep(stack.context);
}

test('a post still in flight when the job finishes lands first; the final state follows it from the sweep', async () => {
  const p = await makeProject(stack, fake, 'github', 'in-flight');
  const commit = sha('in-flight');
  fake.setFile(p.repo, commit, pipelineFile(p.label, ONE_TASK));
  fake.hold();
  let jobId: string;
  try {
    jobId = await push(stack, p, commit);
    await fake.waitForStatuses(commit, 1);
    // The job finishes while "running" is still at the forge.
    assert.equal((await runTasks(stack, p)).at(-1), 'success');
  } finally {
    fake.release();
  }
  await outboxIdle(stack, jobId);
  assert.deepEqual(seen(fake.statusesFor(commit)), ['pending: running 1 task']);

  const summary = await runSweep(stack.context);
  assert.equal(summary.statuses_delivered, 1);
  assert.deepEqual(seenAnswered(fake.statusesFor(commit)), [
    'pending: running 1 task -> 201',
    'success: 1 passed -> 201',
  ]);
});

// Guards a past bug: statuses were ordered per job, so the cancel of the job a
// manual run of the same commit superseded was posted by a later sweep, after
// the new job's status, and the commit showed "cancelled" while the new job
// ran. They are now ordered per commit: the new job's newer row supersedes the
// cancel, and the forge never shows the old job's end over the new job.
test('a manual run of the same commit replaces the running job on the commit, and its cancel never lands after', async () => {
  const p = await makeProject(stack, fake, 'github', 'manual-same-sha');
  const commit = sha('manual-same-sha');
  fake.setFile(p.repo, commit, pipelineFile(p.label, ONE_TASK, 'ci'));
  const first = await push(stack, p, commit);
  await statusesSettled(stack, fake, first, commit, 1);

  const manual = await stack.call('POST', `/v1/projects/${p.id}/jobs`, {
    token: stack.adminToken,
    body: { ref: 'main', sha: commit },
  });
  assert.equal(manual.status, 202, manual.text);
  const second: string = manual.body.job_id;
  await statusesSettled(stack, fake, second, commit, 2);
  await sweepEverythingDue();

  assert.deepEqual(seen(fake.acceptedFor(commit)), [
    'pending: running 1 task',
    'pending: running 1 task',
  ]);
});

test('a failure held up by an outage never overwrites the successful rerun of the same commit', async () => {
  // Guards a past bug: statuses were ordered per job, but the forge keeps one
  // status per commit and context, which a job and its rerun share. The first
  // job's `failure`, still backing off from the outage, was posted after the
  // rerun's `success`, and the commit ended up red although the rerun passed.
  const p = await makeProject(stack, fake, 'github', 'rerun-late');
  const commit = sha('rerun-late');
  fake.setFile(p.repo, commit, pipelineFile(p.label, ONE_TASK, 'ci'));
  const first = await push(stack, p, commit);
  await statusesSettled(stack, fake, first, commit, 1);

  fake.down(500);
  try {
    assert.deepEqual(await runTasks(stack, p, { check: 'failed' }), ['failed']);
  } finally {
    fake.up();
  }
  await outboxIdle(stack, first);

  const rerun = await stack.call('POST', `/v1/jobs/${first}/rerun`, {
    token: stack.adminToken,
    body: {},
  });
  assert.equal(rerun.status, 202, rerun.text);
  assert.equal((await runTasks(stack, p)).at(-1), 'success');
  await sweepEverythingDue();

  const accepted = fake.acceptedFor(commit);
  assert.ok(
    accepted.every((s) => s.body.context === 'conductor/ci'),
    'one context throughout',
  );
  assert.deepEqual(seen(accepted).at(-1), 'success: 1 passed', JSON.stringify(seen(accepted)));
});

test('a rerun of a one-task job says "running 1 task (a rerun)"', async () => {
  // Guards a past bug: the rerun's status said "running 1 tasks".
  const p = await makeProject(stack, fake, 'gitea', 'rerun-plural');
  const commit = sha('rerun-plural');
  fake.setFile(p.repo, commit, pipelineFile(p.label, ONE_TASK));
  const first = await push(stack, p, commit);
  await statusesSettled(stack, fake, first, commit, 1);
  await runTasks(stack, p, { check: 'failed' });
  const rerun = await stack.call('POST', `/v1/jobs/${first}/rerun`, {
    token: stack.adminToken,
    body: { failed_only: true },
  });
  assert.equal(rerun.status, 202, rerun.text);
  assert.deepEqual(seen(fake.statusesFor(commit)), [
    'pending: running 1 task',
    'failure: 0 passed, 1 failed',
    'pending: running 1 task (a rerun)',
  ]);
});
