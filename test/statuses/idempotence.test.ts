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
  whileDown,
} from './support.ts';

const { fake, stack } = await statusStack(import.meta.filename);

/** A job whose start failed to post: one due row, nothing else open. */
async function jobWithUndelivered(id: string) {
  const { p, commit } = await projectOn(stack, fake, 'github', id, ONE_TASK);
  const { jobId } = await whileDown(fake, 500, () => pushSettled(stack, fake, p, commit));
  return { p, commit, jobId };
}

type Deliverer = 'sweep' | 'delivery' | 'post-commit delivery';

/** Ten callers of all three kinds at once, the one of kind `first` started first and held at the forge. */
async function tenAtOnce(id: string, first: Deliverer) {
  const { commit, jobId } = await jobWithUndelivered(id);
  await makeDue(stack, jobId);
  const ctx = stack.context;
  const start = (kind: Deliverer) =>
    kind === 'sweep'
      ? runSweep(ctx)
      : kind === 'delivery'
        ? deliverStatuses(ctx.pool, ctx.keyring, { ...statusOptions(ctx), jobId })
        : deliverJobStatus(ctx, jobId);
  const kinds: Deliverer[] = [
    ...Array<Deliverer>(4).fill('sweep'),
    ...Array<Deliverer>(4).fill('delivery'),
    ...Array<Deliverer>(2).fill('post-commit delivery'),
  ];
  kinds.splice(kinds.indexOf(first), 1);
  fake.hold();
  try {
    // The chosen one claims the row and is at the forge, held there...
    const winner = start(first);
    await fake.waitForStatuses(commit, 2);
    // ...while the nine others run to their end: each finds the row held.
    const others = await Promise.all(kinds.map(start));
    fake.release();
    const won = await winner;
    const delivered = (r: Awaited<ReturnType<typeof start>>) =>
      r && 'statuses_delivered' in r ? r.statuses_delivered : 0;
    assert.equal(delivered(won), 1, `the ${first} delivered it`);
    assert.deepEqual(
      others.map(delivered),
      kinds.map(() => 0),
      'none of the other nine delivered anything',
    );
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
}

for (const first of ['sweep', 'delivery', 'post-commit delivery'] as const) {
  test(`ten sweeps and deliveries at once, a ${first} at the forge while the nine others run, post the status exactly once`, async () => {
    await tenAtOnce(`at-once-${first.replace(/\W+/g, '-')}`, first);
  });
}

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
