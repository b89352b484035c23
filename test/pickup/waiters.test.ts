// The waiting claims of one process: a wake-up between a claim and its wait
// is kept, a channel that goes down ends every wait, and a wait ends on time.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { InProcessPickup, Waiters } from '../../lib/pickup/index.ts';

test('a wake-up that comes while the claim runs ends the next wait at once', async () => {
  const waiters = new Waiters();
  const waiter = waiters.subscribe(() => true);
  // The claim is running (not waiting) when the wake-up comes.
  waiters.wake();
  const started = Date.now();
  assert.equal(await waiter.wait(5_000), 'woken');
  assert.ok(Date.now() - started < 1_000);
  // Used up: the next wait times out.
  assert.equal(await waiter.wait(50), 'timeout');
  waiter.close();
});

test('a wake-up ends every waiting claim, and a closed subscription hears nothing', async () => {
  const waiters = new Waiters();
  const a = waiters.subscribe(() => true);
  const b = waiters.subscribe(() => true);
  const gone = waiters.subscribe(() => true);
  gone.close();
  assert.equal(waiters.size, 2);
  const ends = Promise.all([a.wait(5_000), b.wait(5_000)]);
  waiters.wake();
  assert.deepEqual(await ends, ['woken', 'woken']);
});

test('a channel that is down ends waits at once, and closing the pickup ends those waiting', async () => {
  let live = false;
  const waiters = new Waiters();
  const w = waiters.subscribe(() => live);
  assert.equal(await w.wait(5_000), 'down');
  const pickup = new InProcessPickup();
  const waiting = pickup.subscribe().wait(5_000);
  await pickup.close();
  assert.equal(await waiting, 'down');
  assert.equal(pickup.live, false);
  live = true;
  assert.equal(await w.wait(20), 'timeout');
});

test('an aborted wait ends as aborted', async () => {
  const pickup = new InProcessPickup();
  const ac = new AbortController();
  const waiting = pickup.subscribe().wait(5_000, ac.signal);
  ac.abort();
  assert.equal(await waiting, 'aborted');
});
