// Webhooks that survive a resume, end to end on real PostgreSQL: while the
// database does not answer, the webhook function queues a delivery whose
// signature it can check from the directory, and answers at once; the queue's
// consumer later does the work of a direct delivery, once, however often the
// queue hands it over.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { main as consume } from '../../functions/webhook-queue.ts';
import { createPool } from '../../lib/db/index.ts';
import { type DeliveryMessage, MemoryIntake, type QueuedDelivery } from '../../lib/idle/intake.ts';
import { freePort } from '../../local/postgres.ts';
import { countRows, deliverRunning, sendWebhook, startE2E, waitForJob } from '../e2e/calls.ts';
import { pipeline, sha } from '../e2e/payloads.ts';
import { githubPush } from '../forge/fixtures/github.ts';

const REPO = 'acme/queued';
const {
  fake,
  stack,
  addProject,
  projects: { project },
} = await startE2E(import.meta.filename, {
  env: { CONDUCTOR_WEBHOOK_DB_WAIT_MS: '300' },
  projects: { project: { forge: 'github', id: 'queued', repo: REPO, cancel_superseded: false } },
});
const intake = new MemoryIntake();
stack.context.intake = intake;

/** Runs `fn` while the function's pool cannot reach the database. */
async function whileDatabaseAway<T>(fn: () => Promise<T>): Promise<T> {
  const live = stack.context.pool;
  const away = createPool({
    url: `postgres://postgres@127.0.0.1:${await freePort()}/nowhere`,
    connectTimeoutMs: 200,
  });
  stack.context.pool = away;
  try {
    return await fn();
  } finally {
    stack.context.pool = live;
    await away.end();
  }
}

/** Hands each queued delivery to the consumer as its async invocation would; answers how many failed. */
async function consumeAll(deliveries: QueuedDelivery[]): Promise<number> {
  let failed = 0;
  for (const d of deliveries) {
    const message: DeliveryMessage = {
      forge: d.forge,
      headers: d.headers,
      body: d.body.toString('base64'),
      ...(d.receivedAt ? { receivedAt: d.receivedAt.toISOString() } : {}),
    };
    await consume(message).catch(() => failed++);
  }
  return failed;
}

test('a delivery while the database is away is queued with a 202, and the consumer creates its job once', async () => {
  // A direct delivery first: the database verified the signature, so the
  // directory now vouches for this repository.
  const first = sha('queued-1');
  fake.setFile(REPO, first, pipeline('queued', '  a:\n    script: [make]\n'));
  await deliverRunning(stack, 'github', 'push', githubPush(REPO, first), project.secret);
  assert.equal(intake.entries.size, 1, 'the directory learnt the project');

  const second = sha('queued-2');
  fake.setFile(REPO, second, pipeline('queued', '  a:\n    script: [make]\n'));
  const jobsBefore = await countRows(stack, 'jobs');
  const queued = await whileDatabaseAway(() =>
    sendWebhook(stack, 'github', 'push', githubPush(REPO, second, { ref: 'refs/heads/two' }), {
      secret: project.secret,
      delivery: 'delivery-while-away',
    }),
  );
  assert.equal(queued.status, 202, queued.text);
  assert.deepEqual(queued.body, { queued: true, delivery: 'delivery-while-away' });
  assert.equal(intake.sent.length, 1);
  assert.equal(await countRows(stack, 'jobs'), jobsBefore, 'nothing written while away');

  // The queue delivers at least once: the same message twice.
  for (let i = 0; i < 2; i++) {
    assert.equal(await consumeAll(intake.sent), 0);
  }
  assert.equal(await countRows(stack, 'jobs'), jobsBefore + 1, 'one job for the queued delivery');
  const { rows } = await stack.context.pool.query('select id from jobs where sha = $1', [second]);
  const view = await waitForJob(stack, rows[0].id);
  assert.equal(view.job.state, 'running');
});

test('a delivery whose signature the directory refuses is answered 401 without waiting for the database', async () => {
  const sent = intake.sent.length;
  const forged = await whileDatabaseAway(() =>
    sendWebhook(stack, 'github', 'push', githubPush(REPO, sha('forged')), {
      secret: 'not-the-project-secret',
    }),
  );
  assert.equal(intake.sent.length, sent, 'a bad signature is never queued');
  assert.equal(forged.status, 401, forged.text);
});

test('a delivery queued while the database was away, handled after a later direct one, neither cancels it nor outlives it', async () => {
  const ordered = await addProject({
    forge: 'github',
    id: 'ordered',
    repo: 'acme/ordered',
    cancel_superseded: true,
  });
  const file = pipeline('ordered', '  a:\n    script: [make]\n');
  const [first, older, newer] = ['ordered-1', 'ordered-2', 'ordered-3'].map((n) => sha(n));
  for (const s of [first, older, newer]) fake.setFile('acme/ordered', s!, file);
  // The directory learns the project from a direct delivery.
  await deliverRunning(stack, 'github', 'push', githubPush('acme/ordered', first!), ordered.secret);
  const queued = await whileDatabaseAway(() =>
    sendWebhook(stack, 'github', 'push', githubPush('acme/ordered', older!), {
      secret: ordered.secret,
      delivery: 'ordered-older',
    }),
  );
  assert.equal(queued.status, 202, queued.text);
  // A later push goes straight in while the older one is still queued.
  const direct = await sendWebhook(stack, 'github', 'push', githubPush('acme/ordered', newer!), {
    secret: ordered.secret,
    delivery: 'ordered-newer',
  });
  assert.equal(direct.status, 202, direct.text);
  const newerJob = (direct.body as { job_id: string }).job_id;
  assert.equal(await consumeAll(intake.sent.slice(-1)), 0);
  const { rows } = await stack.context.pool.query<{ id: string; state: string; number: number }>(
    'select id, state, number from jobs where sha = $1',
    [older],
  );
  const olderJob = rows[0]!;
  assert.ok(olderJob.number > (direct.body as { number: number }).number, 'numbered after it');
  assert.equal(olderJob.state, 'cancelled', 'the older commit is superseded by the newer');
  const view = await waitForJob(stack, newerJob);
  assert.notEqual(view.job.state, 'cancelled', 'the newer commit is not cancelled');
});

test('the consumer drops a queued delivery the contract refuses (bad signature) and writes nothing', async () => {
  const jobs = await countRows(stack, 'jobs');
  const body = Buffer.from(JSON.stringify(githubPush(REPO, sha('refused'))));
  const failed = await consumeAll([
    {
      forge: 'github',
      headers: {
        'x-github-event': 'push',
        'x-github-delivery': 'refused-1',
        'x-hub-signature-256': `sha256=${'0'.repeat(64)}`,
      },
      body,
    },
  ]);
  assert.equal(failed, 0, 'not retried: it would be refused again');
  assert.equal(await countRows(stack, 'jobs'), jobs);
});

test('a queued delivery the consumer cannot handle yet (no database) fails its invocation, so Lambda tries it again', async () => {
  const body = Buffer.from(JSON.stringify(githubPush(REPO, sha('later'))));
  const message: DeliveryMessage = {
    forge: 'github',
    headers: { 'x-github-event': 'push', 'x-github-delivery': 'later-1' },
    body: body.toString('base64'),
  };
  await whileDatabaseAway(() => assert.rejects(consume(message), /tries it again/));
});
