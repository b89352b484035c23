// "A newer state is never overwritten by an older one arriving late", as the
// forge sees it: a forge keeps the latest status per commit and context, so
// what matters is the order in which the posts for one commit and context land.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runSweep } from '../../lib/app/sweep.ts';
import {
  adminCall,
  ONE_TASK,
  outboxIdle,
  projectOn,
  push,
  pushSettled,
  runTasks,
  seen,
  seenAnswered,
  statusesSettled,
  statusStack,
  sweepAllDue,
  whileDown,
} from './support.ts';

const { fake, stack } = await statusStack(import.meta.filename);

test('a post still in flight when the job finishes lands first; its deliverer then posts the final state, with no sweep', async () => {
  const { p, commit } = await projectOn(stack, fake, 'github', 'in-flight', ONE_TASK);
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
  // The final row found "running" in flight and was left to it: once that
  // post is answered, its deliverer takes the row that became due meanwhile.
  await statusesSettled(stack, fake, jobId, commit, 2);
  assert.deepEqual(seenAnswered(fake.statusesFor(commit)), [
    'pending: running 1 task -> 201',
    'success: 1 passed -> 201',
  ]);
  const summary = await runSweep(stack.context);
  assert.equal(summary.statuses_delivered, 0, 'nothing was left for the sweep');
});

// Guards a past bug: statuses were ordered per job, so the cancel of the job a
// manual run of the same commit superseded was posted by a later sweep, after
// the new job's status, and the commit showed "cancelled" while the new job
// ran. They are now ordered per commit: the new job's newer row supersedes the
// cancel, and the forge never shows the old job's end over the new job.
test('a manual run of the same commit replaces the running job on the commit, and its cancel never lands after', async () => {
  const { p, commit } = await projectOn(stack, fake, 'github', 'manual-same-sha', ONE_TASK, 'ci');
  await pushSettled(stack, fake, p, commit);

  const manual = await adminCall(stack, 'POST', `/v1/projects/${p.id}/jobs`, 202, {
    ref: 'main',
    sha: commit,
  });
  const second: string = manual.body.job_id;
  await statusesSettled(stack, fake, second, commit, 2);
  await sweepAllDue(stack);

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
  const { p, commit } = await projectOn(stack, fake, 'github', 'rerun-late', ONE_TASK, 'ci');
  const { jobId: first } = await pushSettled(stack, fake, p, commit);

  await whileDown(fake, 500, async () => {
    assert.deepEqual(await runTasks(stack, p, { check: 'failed' }), ['failed']);
  });
  await outboxIdle(stack, first);

  await adminCall(stack, 'POST', `/v1/jobs/${first}/rerun`, 202, {});
  assert.equal((await runTasks(stack, p)).at(-1), 'success');
  await sweepAllDue(stack);

  const accepted = fake.acceptedFor(commit);
  assert.ok(
    accepted.every((s) => s.body.context === 'conductor/ci'),
    'one context throughout',
  );
  assert.deepEqual(seen(accepted).at(-1), 'success: 1 passed', JSON.stringify(seen(accepted)));
});

test('a rerun of a one-task job says "running 1 task (a rerun)"', async () => {
  // Guards a past bug: the rerun's status said "running 1 tasks".
  const { p, commit } = await projectOn(stack, fake, 'gitea', 'rerun-plural', ONE_TASK);
  const { jobId: first } = await pushSettled(stack, fake, p, commit);
  await runTasks(stack, p, { check: 'failed' });
  await adminCall(stack, 'POST', `/v1/jobs/${first}/rerun`, 202, { failed_only: true });
  assert.deepEqual(seen(fake.statusesFor(commit)), [
    'pending: running 1 task',
    'failure: 0 passed, 1 failed',
    'pending: running 1 task (a rerun)',
  ]);
});
