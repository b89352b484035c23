// Delivering twice is harmless: any number of sweeps and post-commit
// deliveries running at once post a job's status once, because a deliverer
// claims the job's newest row while it calls the forge; a claim left by a
// deliverer that died holds the row only until it expires.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { deliverJobStatus, deliverStatuses, statusOptions } from '../../lib/app/statuses.ts';
import { runSweep } from '../../lib/app/sweep.ts';
import {
  makeDue,
  ONE_TASK,
  outbox,
  outboxIdle,
  projectOn,
  pushSettled,
  runTasks,
  seen,
  seenAnswered,
  statusStack,
  waitUntil,
  whileDown,
} from './support.ts';

const { fake, stack } = await statusStack(import.meta.filename);

/** A job whose start failed to post: one due row, nothing else open. */
async function jobWithUndelivered(id: string) {
  const { p, commit } = await projectOn(stack, fake, 'github', id, ONE_TASK);
  const { jobId } = await whileDown(fake, 500, () => pushSettled(stack, fake, p, commit));
  return { p, commit, jobId };
}

test('ten sweeps and deliveries at once, one of them in flight at the forge while the others run, post the status exactly once', async () => {
  const { commit, jobId } = await jobWithUndelivered('at-once');
  await makeDue(stack, jobId);
  const ctx = stack.context;
  fake.hold();
  let finished = 0;
  const track = <T>(work: Promise<T>) =>
    work.finally(() => {
      finished++;
    });
  try {
    const all = Promise.all([
      ...Array.from({ length: 4 }, () => track(runSweep(ctx))),
      ...Array.from({ length: 4 }, () =>
        track(deliverStatuses(ctx.pool, ctx.keyring, { ...statusOptions(ctx), jobId })),
      ),
      ...Array.from({ length: 2 }, () => track(deliverJobStatus(ctx, jobId))),
    ]);
    // One deliverer is at the forge; every other one finds the row held and is done.
    await fake.waitForStatuses(commit, 2);
    await waitUntil('nine of the ten calls finished', async () => finished === 9);
    fake.release();
    const results = await all;
    const delivered = results.reduce(
      (n, r) => n + (r && 'statuses_delivered' in r ? r.statuses_delivered : 0),
      0,
    );
    assert.equal(delivered, 1, 'one call delivered it');
  } finally {
    fake.release();
  }
  assert.deepEqual(seenAnswered(fake.statusesFor(commit)), [
    'pending: running 1 task -> 500',
    'pending: running 1 task -> 201',
  ]);

  // And again, with nothing held: still nothing more.
  await Promise.all(Array.from({ length: 5 }, () => runSweep(ctx)));
  assert.equal(fake.statusesFor(commit).length, 2);
  assert.deepEqual(
    (await outbox(stack, jobId)).map((r) => r.result),
    ['superseded', 'delivered'],
  );
});

test('a state change delivered by its own route and by concurrent sweeps reaches the forge once', async () => {
  const { p, commit } = await projectOn(stack, fake, 'github', 'settle-race', ONE_TASK);
  const { jobId } = await pushSettled(stack, fake, p, commit);

  const sweeps = Promise.all(Array.from({ length: 5 }, () => runSweep(stack.context)));
  const [states] = await Promise.all([runTasks(stack, p), sweeps]);
  assert.deepEqual(states, ['success']);
  await Promise.all(Array.from({ length: 5 }, () => runSweep(stack.context)));
  await outboxIdle(stack, jobId);
  assert.deepEqual(seen(fake.statusesFor(commit)), [
    'pending: running 1 task',
    'success: 1 passed',
  ]);
});

test('a row held by a deliverer that died is left alone until its claim expires, then posted once', async () => {
  const { commit, jobId } = await jobWithUndelivered('dead-claim');
  await makeDue(stack, jobId);
  await stack.context.pool.query(
    `update status_outbox set claimed_until = now() + interval '60 seconds'
      where job_id = $1 and result is null`,
    [jobId],
  );
  const held = await runSweep(stack.context);
  assert.equal(held.statuses_delivered, 0);
  assert.equal(fake.statusesFor(commit).length, 1);

  await stack.context.pool.query(
    `update status_outbox set claimed_until = now() - interval '1 second'
      where job_id = $1 and result is null`,
    [jobId],
  );
  const expired = await runSweep(stack.context);
  assert.equal(expired.statuses_delivered, 1);
  assert.deepEqual(seen(fake.acceptedFor(commit)), ['pending: running 1 task']);
  assert.equal((await outbox(stack, jobId)).at(-1)!.result, 'delivered');
});
