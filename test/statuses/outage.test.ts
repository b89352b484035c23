// The forge down for a while and then back: posts fail and are retried by the
// sweep with backoff, nothing is lost, and once the forge answers again it
// receives the job's newest state only, once, never an older one after it.
// The sweep is driven by hand (runSweep), and instead of waiting for a backoff
// the tests move next_attempt_at into the past.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runSweep } from '../../lib/app/sweep.ts';
import { sha } from '../e2e/payloads.ts';
import {
  adminCall,
  assertWaits,
  compileFailed,
  during,
  makeProject,
  outbox,
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
  sweepDue,
  TWO_TASKS,
  waitUntil,
  whileDown,
} from './support.ts';

const { fake, stack } = await statusStack(import.meta.filename);

/** Ranks a post in a job's life: the start, then the end. */
function rank(description: string, state: string): number {
  if (state !== 'pending') return 2;
  return description.startsWith('running') ? 1 : 0;
}

function neverBackwards(posts: { body: { state: string; description: string } }[]): void {
  const ranks = posts.map((p) => rank(p.body.description, p.body.state));
  for (let i = 1; i < ranks.length; i++) {
    assert.ok(ranks[i]! >= ranks[i - 1]!, `an older state followed a newer one: ${ranks}`);
  }
}

test('with the forge answering 500, the start and the end of a job fail; once it is back the sweep posts only the final success, once', async () => {
  const { p, commit } = await projectOn(stack, fake, 'github', 'down-500', TWO_TASKS);
  await whileDown(fake, 500, async () => {
    const pushed = await during(stack, () => pushSettled(stack, fake, p, commit));
    const { jobId } = pushed.value;
    let rows = await outbox(stack, jobId);
    const running = rows[1]!;
    assert.equal(running.description, 'running 2 tasks');
    assert.equal(running.result, null, 'a failed post is kept for the sweep');
    assert.equal(running.attempts, 1);
    assert.equal(
      running.last_error,
      `github answered HTTP 500 for ${fake.url}/repos/${p.repo}/statuses/${commit}`,
    );
    assertWaits(running, 5, pushed);

    // Not due yet (put an hour out, so that a slow machine cannot make it due
    // meanwhile): the sweep leaves it.
    await stack.context.pool.query(
      `update status_outbox set next_attempt_at = now() + interval '1 hour' where id = $1`,
      [running.id],
    );
    const early = await runSweep(stack.context);
    assert.equal(early.statuses_failed, 0);
    assert.equal(fake.statusesFor(commit).length, 1);

    // Due: the sweep tries again and counts the failure.
    const retried = await during(stack, () => sweepDue(stack, jobId));
    assert.equal(retried.value.statuses_failed, 1);
    assert.equal(retried.value.statuses_delivered, 0);
    rows = await outbox(stack, jobId);
    assert.equal(rows[1]!.attempts, 2);
    assertWaits(rows[1]!, 10, retried);

    // The job finishes while the forge is still down: the completion's own
    // delivery supersedes "running" and fails to post "success".
    assert.equal((await runTasks(stack, p)).at(-1), 'success');
    rows = await outboxIdle(stack, jobId);
    assert.deepEqual(
      rows.map((r) => [r.description, r.result, r.attempts]),
      [
        ['waiting for the pipeline to be read', 'superseded', 0],
        ['running 2 tasks', 'superseded', 2],
        ['2 passed', null, 1],
      ],
    );

    fake.up();
    const notYet = await runSweep(stack.context);
    assert.equal(notYet.statuses_delivered, 0, 'the backoff is honoured after the forge is back');
    const back = await sweepDue(stack, jobId);
    assert.equal(back.statuses_delivered, 1);
    assert.equal(back.statuses_failed, 0);

    const posts = fake.statusesFor(commit);
    assert.deepEqual(seenAnswered(posts), [
      'pending: running 2 tasks -> 500',
      'pending: running 2 tasks -> 500',
      'success: 2 passed -> 500',
      'success: 2 passed -> 201',
    ]);
    assert.deepEqual(seen(fake.acceptedFor(commit)), ['success: 2 passed']);
    neverBackwards(posts);
    assert.equal((await outbox(stack, jobId)).at(-1)!.result, 'delivered');

    // Nothing is left: more sweeps post nothing.
    await sweepDue(stack, jobId);
    assert.equal(fake.statusesFor(commit).length, 4);
  });
});

test('two state changes while the forge is down and the first post still in flight: the sweep supersedes the older and posts only the final one', async () => {
  const { p, commit } = await projectOn(stack, fake, 'github', 'down-held', TWO_TASKS, 'api');
  fake.down(500);
  fake.hold();
  try {
    const jobId = await push(stack, p, commit);
    // The start's post is in flight: its row is claimed.
    await fake.waitForStatuses(commit, 1);
    assert.ok((await outbox(stack, jobId))[1]!.claimed);

    // The job runs to success meanwhile; the completion's delivery finds the
    // job's row held and leaves the new one to the sweep.
    assert.equal((await runTasks(stack, p)).at(-1), 'success');
    assert.equal(fake.statusesFor(commit).length, 1);

    fake.release();
    const rows = await outboxIdle(stack, jobId);
    assert.deepEqual(
      rows.map((r) => [r.description, r.result, r.attempts]),
      [
        ['waiting for the pipeline to be read', 'superseded', 0],
        ['running 2 tasks', null, 1],
        ['2 passed', null, 0],
      ],
    );

    // Still down: the sweep supersedes "running" and fails to post "success".
    const down = await runSweep(stack.context);
    assert.equal(down.statuses_superseded, 1);
    assert.equal(down.statuses_failed, 1);
    assert.equal(down.statuses_delivered, 0);

    fake.up();
    const back = await sweepDue(stack, jobId);
    assert.equal(back.statuses_delivered, 1);
    assert.equal(back.statuses_superseded, 0);

    const posts = fake.statusesFor(commit);
    assert.deepEqual(seenAnswered(posts), [
      'pending: running 2 tasks -> 500',
      'success: 2 passed -> 500',
      'success: 2 passed -> 201',
    ]);
    assert.deepEqual(
      fake.acceptedFor(commit).map((s) => s.body.context),
      ['conductor/api'],
    );
    neverBackwards(posts);
  } finally {
    fake.release();
    fake.up();
  }
});

test('on Gitea with dropped connections, a cancel while down is kept and posted alone once the forge is back', async () => {
  const { p, commit } = await projectOn(stack, fake, 'gitea', 'down-reset', TWO_TASKS);
  await whileDown(fake, 'reset', async () => {
    const { jobId } = await pushSettled(stack, fake, p, commit);
    const failed = (await outbox(stack, jobId))[1]!;
    assert.equal(failed.result, null);
    assert.match(
      failed.last_error ?? '',
      /^could not reach gitea at http:\/\/127\.0\.0\.1:\d+\/api\/v1\/repos\/.+\/statuses\/[0-9a-f]+: \S/,
      'the network error is recorded with the URL and its cause',
    );

    await adminCall(stack, 'POST', `/v1/jobs/${jobId}/cancel`, 200);
    await outboxIdle(stack, jobId);
    assert.deepEqual(seenAnswered(fake.statusesFor(commit)), [
      'pending: running 2 tasks -> reset',
      'error: cancelled: cancelled through the API -> reset',
    ]);

    const still = await sweepDue(stack, jobId);
    assert.equal(still.statuses_failed, 1);

    fake.up();
    const back = await sweepDue(stack, jobId);
    assert.equal(back.statuses_delivered, 1);
    const accepted = fake.acceptedFor(commit);
    assert.deepEqual(seen(accepted), ['error: cancelled: cancelled through the API']);
    assert.equal(accepted[0]!.path, `/api/v1/repos/${p.repo}/statuses/${commit}`);
    assert.equal(accepted[0]!.authorization, `token ${p.forgeToken}`);
  });
});

test('the retry backoff doubles from 5 s and stops growing at 10 minutes', async () => {
  const { p, commit } = await projectOn(stack, fake, 'github', 'backoff', TWO_TASKS);
  await whileDown(fake, 503, async () => {
    const pushed = await during(stack, () => pushSettled(stack, fake, p, commit));
    const { jobId } = pushed.value;
    assertWaits((await outbox(stack, jobId))[1]!, 5, pushed, 'wait 1');
    for (const [i, step] of [10, 20, 40].entries()) {
      const swept = await during(stack, () => sweepDue(stack, jobId));
      assert.equal(swept.value.statuses_failed, 1);
      assertWaits((await outbox(stack, jobId))[1]!, step, swept, `wait ${i + 2}`);
    }

    await stack.context.pool.query(
      'update status_outbox set attempts = 15 where job_id = $1 and result is null',
      [jobId],
    );
    const capping = await during(stack, () => sweepDue(stack, jobId));
    assert.equal(capping.value.statuses_failed, 1);
    const capped = (await outbox(stack, jobId))[1]!;
    assert.equal(capped.attempts, 16);
    assertWaits(capped, 600, capping, 'capped');
  });
  await sweepAllDue(stack);
  assert.deepEqual(seen(fake.acceptedFor(commit)), ['pending: running 2 tasks']);
});

test('a compile that cannot read the pipeline leaves the creation status, which is posted once due; the start follows when the forge is back', async () => {
  const only = '  only:\n    script: [make]\n';
  const { p, commit } = await projectOn(stack, fake, 'github', 'slow-compile', only);
  // Everything down: the pipeline file cannot be read either.
  const jobId = await whileDown(
    fake,
    502,
    async () => {
      const pushed = await during(stack, () => push(stack, p, commit));
      const jobId = pushed.value;
      await compileFailed(stack, jobId);
      const [creation] = await outboxIdle(stack, jobId);
      assert.equal(creation!.description, 'waiting for the pipeline to be read');
      assert.equal(creation!.attempts, 0, 'held back: nothing was posted yet');
      assertWaits(creation!, 5, pushed, 'the hold-back');
      return jobId;
    },
    { files: true },
  );
  assert.equal(fake.acceptedFor(commit).length, 0);

  // Its 5 s pass with the job still pending: the sweep posts it. On a loaded
  // machine the hold-back may already have passed when the compile gave up,
  // and the compile's own delivery after it tries it instead (or holds it
  // while the sweep runs): either way the forge accepts it once.
  const posted = await sweepDue(stack, jobId);
  await waitUntil(
    'the creation status is accepted',
    async () => fake.acceptedFor(commit).length > 0,
  );
  assert.ok(posted.statuses_delivered <= 1);
  assert.deepEqual(seen(fake.acceptedFor(commit)), [
    'pending: waiting for the pipeline to be read',
  ]);

  // The lost compile is dispatched again; it starts the job, and that is posted.
  await stack.context.pool.query(
    `update jobs set dispatched_at = now() - interval '1 hour' where id = $1`,
    [jobId],
  );
  const redispatched = await runSweep(stack.context);
  assert.equal(redispatched.compiles_redispatched, 1);
  await statusesSettled(stack, fake, jobId, commit, 2);
  assert.deepEqual(seen(fake.acceptedFor(commit)), [
    'pending: waiting for the pipeline to be read',
    'pending: running 1 task',
  ]);
  assert.equal((await runTasks(stack, p)).at(-1), 'success');
  assert.deepEqual(seen(fake.acceptedFor(commit)), [
    'pending: waiting for the pipeline to be read',
    'pending: running 1 task',
    'success: 1 passed',
  ]);
});

test('a job whose pipeline still cannot be read after its last compile attempt is failed by the sweep, which posts the error in the same run', async () => {
  const p = await makeProject(stack, fake, 'github', 'never-read');
  const commit = sha('never-read');
  // Only the file reads fail; statuses are taken.
  fake.files.down(500);
  try {
    const jobId = await push(stack, p, commit);
    await compileFailed(stack, jobId);
    await stack.context.pool.query(
      `update jobs set compile_attempts = 5, dispatched_at = now() - interval '1 hour'
        where id = $1`,
      [jobId],
    );
    const summary = await runSweep(stack.context);
    assert.equal(summary.compiles_failed, 1);
    assert.equal(summary.statuses_delivered, 1);
    assert.equal(summary.statuses_superseded, 1, 'the creation status, never posted');
    const posts = fake.statusesFor(commit);
    assert.equal(posts.length, 1);
    assert.equal(posts[0]!.body.state, 'error');
    assert.match(
      posts[0]!.body.description,
      /^the pipeline could not be read after 5 attempts: .*500/,
    );
  } finally {
    fake.files.up();
  }
});
