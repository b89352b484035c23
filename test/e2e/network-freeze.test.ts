// A silent network under the real local HTTP server (#35): the stack's
// database connections go through a TCP proxy that freezes the wire, the
// whole of it or one connection right after a statement was sent. Every
// request must answer `503 unavailable` with Retry-After within the local
// bound (docs/database.md, "Bounded calls": 10 s for a call, 20 s for a claim
// that gives its lease back), the server must recover without a restart
// once the network is back, and no pool slot may be leaked.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { runSweep } from '../../lib/app/sweep.ts';
import { testDatabase } from '../helpers/db.ts';
import { startTcpProxy } from '../helpers/tcp-proxy.ts';
import {
  claim,
  claimTask,
  createWorker,
  heartbeat,
  pushRunning,
  type Reply,
  startE2E,
} from './calls.ts';

const db = await testDatabase(import.meta.filename);
const proxy = await startTcpProxy(db.url);
after(() => proxy.close());
const e2e = await startE2E(import.meta.filename, {
  // A lease that outlives the freezes, so the heartbeats after them hold.
  env: { DATABASE_URL: proxy.url(db.url), CONDUCTOR_LEASE_S: '600' },
  projects: {
    project: {
      forge: 'github',
      id: 'net-freeze',
      repo: 'acme/net-freeze',
      cancel_superseded: false,
    },
  },
});
const { stack } = e2e;
const pool = stack.context.pool;
const project = { repo: 'acme/net-freeze', secret: e2e.projects.project.secret };

// The local bound of one call is 10 s (a silent statement: 8 s statement
// timeout plus 2 s; a silent connect or a wait for a slot: 10 s); a claim
// whose statement went silent then gives its lease back, one call more.
const CALL_MS = 10_000;
const CLAIM_MS = 2 * CALL_MS;
// Far above the bounds, so only a request that did not end (or waited out
// more calls than it makes) fails, whatever else the machine runs.
const SLACK_MS = 10_000;

const { token } = await createWorker(stack, ['freeze']);
await pushRunning(e2e, project, 'freeze', '  a:\n    script: [make a]\n');
const task = await claimTask(stack, token);
// Nothing else is claimable for this worker: its claims answer 204.

async function timed(call: () => Promise<Reply>): Promise<Reply & { ms: number }> {
  const started = Date.now();
  const res = await call();
  return { ...res, ms: Date.now() - started };
}

function assertUnavailable(res: Reply & { ms: number }, boundMs: number, what: string) {
  assert.equal(res.status, 503, `${what}: ${res.text}`);
  assert.equal(res.body.error.code, 'unavailable', what);
  assert.match(String(res.headers.get('retry-after')), /^[1-9][0-9]*$/, what);
  assert.ok(res.ms < boundMs + SLACK_MS, `${what} answered after ${res.ms} ms`);
}

/** N requests in a row all succeed, and the pool holds no slot it should not. */
async function assertRecovered(n: number) {
  for (let i = 0; i < n; i++) {
    const beat = await heartbeat(stack, token, task.id, task.lease_id);
    assert.equal(beat.status, 200, `heartbeat ${i}: ${beat.text}`);
    const health = await stack.call('GET', '/v1/health');
    assert.equal(health.status, 200, `health ${i}: ${health.text}`);
    const none = await claim(stack, token);
    assert.equal(none.status, 204, `claim ${i}: ${none.text}`);
  }
  assert.ok(pool.totalCount <= stack.context.config.CONDUCTOR_DB_POOL_MAX, `${pool.totalCount}`);
  assert.equal(pool.waitingCount, 0, 'nothing waits for a slot');
  assert.equal(pool.idleCount, pool.totalCount, 'every connection came back to the pool');
}

test('with the whole network frozen every request answers 503 with Retry-After within the bound; after the thaw 20 rounds of requests succeed and no slot is leaked', async () => {
  await assertRecovered(2);
  proxy.freezeAll();
  let answers: Array<Reply & { ms: number }>;
  try {
    // More requests than the pool has connections (10): some find a frozen
    // idle connection, some a connect that never finishes, some wait for a
    // slot.
    answers = await Promise.all([
      ...Array.from({ length: 4 }, () => timed(() => stack.call('GET', '/v1/health'))),
      ...Array.from({ length: 4 }, () =>
        timed(() => heartbeat(stack, token, task.id, task.lease_id)),
      ),
      ...Array.from({ length: 4 }, () => timed(() => claim(stack, token))),
    ]);
  } finally {
    proxy.thawAll();
  }
  answers.forEach((res, i) => {
    assertUnavailable(res, i >= 8 ? CLAIM_MS : CALL_MS, `request ${i}`);
  });
  await assertRecovered(20);
});

test('one connection frozen right after its statement was sent: that request answers 503 within the bound, the others are served meanwhile, and the connection is not used again', async () => {
  const frozen = proxy.once('conductor_heartbeat', 'freeze');
  const stuck = timed(() => heartbeat(stack, token, task.id, task.lease_id));
  await frozen;
  // The rest of the pool serves while one connection is silent.
  const health = await stack.call('GET', '/v1/health');
  assert.equal(health.status, 200, health.text);
  assertUnavailable(await stuck, CALL_MS, 'the frozen heartbeat');
  await assertRecovered(20);
});

test('a sweep on a frozen network stops at the first silent call: it ends within the bound, counts it deferred, not as an error, and skips the rest', async () => {
  await assertRecovered(1);
  proxy.freezeAll();
  let summary: Awaited<ReturnType<typeof runSweep>>;
  const started = Date.now();
  try {
    summary = await runSweep(stack.context);
  } finally {
    proxy.thawAll();
  }
  const ms = Date.now() - started;
  assert.ok(ms < CALL_MS + SLACK_MS, `the sweep ended after ${ms} ms`);
  assert.equal(summary.errors, 0, JSON.stringify(summary));
  assert.equal(summary.deferred, 1, JSON.stringify(summary));
  assert.ok(summary.skipped.includes('retention'), JSON.stringify(summary.skipped));
  await assertRecovered(5);
});
