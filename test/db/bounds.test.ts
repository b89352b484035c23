// Bounded calls (#35): a network that goes silent (a half-open connection, a
// NAT or Aurora that dropped the flow) must not hang a call or hold its pool
// slot. A TCP proxy between the pool and PostgreSQL freezes the wire at an
// exact point; each call must end within its bound, the silent connection
// must be destroyed (never handed out again), and the pool must serve again
// once the network is back. The bounds are scaled down here (a statement
// timeout of 0.5 s, a connect timeout of 1.5 s); docs/database.md has the
// deployed ones.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, test } from 'node:test';
import type pg from 'pg';
import {
  CALL_BOUNDS,
  createPool,
  isConnectionError,
  type Pool,
  statement,
  transaction,
  unavailability,
} from '../../lib/db/index.ts';
import { testDatabase } from '../helpers/db.ts';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.ts';

const db = await testDatabase(import.meta.filename, { migrate: false });

// Far above each bound below, so only a call that did not end (or waited out
// a second bound) fails it, whatever else the machine runs.
const SLACK_MS = 10_000;

async function proxied(): Promise<TcpProxy> {
  const proxy = await startTcpProxy(db.url);
  after(() => proxy.close());
  return proxy;
}

function poolVia(proxy: TcpProxy, opts: Partial<Parameters<typeof createPool>[0]> = {}): Pool {
  const pool = createPool({ url: proxy.url(db.url), ...opts });
  after(() => pool.end());
  return pool;
}

/** Runs `call` and answers what it was rejected with and how long it took; fails if it succeeds. */
async function rejection(call: () => Promise<unknown>): Promise<{ err: unknown; ms: number }> {
  const started = Date.now();
  try {
    await call();
  } catch (err) {
    return { err, ms: Date.now() - started };
  }
  assert.fail('the call succeeded on a silent network');
}

/** Polls until `probe` answers something, for at most 30 s. */
async function until<T>(what: string, probe: () => Promise<T | undefined> | T | undefined) {
  for (const deadline = Date.now() + 30_000; Date.now() < deadline; ) {
    const value = await probe();
    if (value !== undefined && value !== false) return value;
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.fail(`never happened: ${what}`);
}

const pidOf = async (pool: Pool) =>
  (await statement<{ pid: number }>(pool, { text: 'select pg_backend_pid() as pid' }))[0]!.pid;

/** Every query text a pool's clients send from now on. */
function recordQueries(pool: Pool): string[] {
  const sent: string[] = [];
  const seen = new WeakSet<pg.PoolClient>();
  pool.on('acquire', (client) => {
    if (seen.has(client)) return;
    seen.add(client);
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    (client as { query: unknown }).query = (config: unknown, ...rest: unknown[]) => {
      sent.push(typeof config === 'string' ? config : String((config as pg.QueryConfig).text));
      return query(config, ...rest);
    };
  });
  return sent;
}

test('the deployed bounds: the client waits for a reply longer than the server lets a statement run', () => {
  assert.ok(CALL_BOUNDS.statementTimeoutMs > 5_000, 'above the hot functions lock_timeout (5 s)');
  assert.ok(CALL_BOUNDS.queryTimeoutMarginMs > 0);
  // An HTTP Lambda answers its early-timeout 503 at 23.5 s: one silent
  // statement, or one silent connect, ends well before.
  const queryTimeout = CALL_BOUNDS.statementTimeoutMs + CALL_BOUNDS.queryTimeoutMarginMs;
  assert.ok(Math.max(queryTimeout, CALL_BOUNDS.connectTimeoutMs) <= 12_000);
});

test("the pool's sessions carry the statement timeout, keepalive is on, and the server cancels a slow statement before the client gives up", async () => {
  const pool = createPool({ url: db.url, max: 1, statementTimeoutMs: 300 });
  after(() => pool.end());
  const { rows } = await pool.query<{ st: string }>(
    `select current_setting('statement_timeout') as st`,
  );
  assert.equal(rows[0]!.st, '300ms');
  const client = await pool.connect();
  try {
    const socket = (client as unknown as { connection: { _keepAlive: boolean } }).connection;
    assert.equal(socket._keepAlive, true);
  } finally {
    client.release();
  }
  const pid = await pidOf(pool);
  // On a healthy network the server's 57014 comes first: the statement
  // rolled back, and the connection stays in the pool.
  const { err } = await rejection(() => statement(pool, { text: 'select pg_sleep(5)' }));
  assert.equal(unavailability(err), 'statement-timeout');
  assert.equal(await pidOf(pool), pid, 'the connection was kept');
});

test('a statement whose connection goes silent after it was sent fails within the query bound; the connection is destroyed, not handed out again', async () => {
  const proxy = await proxied();
  const pool = poolVia(proxy, { max: 2, statementTimeoutMs: 500 });
  const before = await pidOf(pool);
  const frozen = proxy.once('/* silent statement */', 'freeze');
  const { err, ms } = await rejection(() =>
    statement(pool, { text: 'select 1 /* silent statement */' }),
  );
  await frozen;
  assert.equal(unavailability(err), 'silent', String(err));
  assert.ok(isConnectionError(err), 'withClient releases it as broken');
  assert.ok(ms < 500 + CALL_BOUNDS.queryTimeoutMarginMs + SLACK_MS, `ended after ${ms} ms`);
  assert.equal(pool.totalCount, 0, 'the silent connection left the pool');
  const next = await pidOf(pool);
  assert.notEqual(next, before, 'the next call has a fresh connection');
  assert.equal(pool.totalCount, 1);
  assert.equal(pool.idleCount, 1);
});

test("a transaction's statements are bounded by its own statement timeout, and a silent one is not followed by a rollback on that connection", async () => {
  const proxy = await proxied();
  // The pool's own bound (32 s) is far past the transaction's (0.3 s + 2 s).
  const pool = poolVia(proxy, { max: 1, statementTimeoutMs: 30_000 });
  const sent = recordQueries(pool);
  const frozen = proxy.once('/* silent in a transaction */', 'freeze');
  const { err, ms } = await rejection(() =>
    transaction(pool, (tx) => tx.query('select 1 /* silent in a transaction */'), {
      statementTimeoutMs: 300,
    }),
  );
  await frozen;
  assert.equal(unavailability(err), 'silent', String(err));
  assert.ok(ms < 300 + CALL_BOUNDS.queryTimeoutMarginMs + SLACK_MS, `ended after ${ms} ms`);
  assert.ok(
    !sent.some((q) => /^rollback/i.test(q)),
    `no rollback queued behind the silent statement: ${JSON.stringify(sent)}`,
  );
  assert.equal(pool.totalCount, 0, 'the connection was destroyed');
  assert.equal(
    await transaction(pool, async (tx) => (await tx.query('select 2 as v')).rows[0].v),
    2,
  );
});

test('a connect into a silent network ends at the connect timeout, and is not tried again (that would double the bound)', async () => {
  const proxy = await proxied();
  const pool = poolVia(proxy, { max: 1, connectTimeoutMs: 1_500 });
  proxy.freezeAll();
  const { err, ms } = await rejection(() => statement(pool, { text: 'select 1' }));
  assert.equal(unavailability(err), 'silent', String(err));
  assert.ok(ms < 1_500 + SLACK_MS, `ended after ${ms} ms`);
  assert.equal(proxy.accepted(), 1, 'one connect, not two');
  proxy.thawAll();
  assert.equal((await statement<{ v: number }>(pool, { text: 'select 3 as v' }))[0]!.v, 3);
});

test('with the whole network frozen every call ends within its bound; after the thaw the pool serves 20 calls in a row and no slot is leaked', async () => {
  const proxy = await proxied();
  const max = 4;
  const pool = poolVia(proxy, { max, statementTimeoutMs: 500, connectTimeoutMs: 1_500 });
  // Two idle connections (they freeze under a call), and room for two new
  // ones (their connects freeze) and for calls that wait for a slot.
  await Promise.all([
    statement(pool, { text: 'select pg_sleep(0.1)' }),
    statement(pool, { text: 'select pg_sleep(0.1)' }),
  ]);
  assert.equal(pool.idleCount, 2);
  proxy.freezeAll();
  const bound = Math.max(500 + CALL_BOUNDS.queryTimeoutMarginMs, 1_500) + SLACK_MS;
  const calls = await Promise.all(
    Array.from({ length: 8 }, (_, i) =>
      rejection(() => statement(pool, { text: `select ${i} /* frozen network */` })),
    ),
  );
  for (const { err, ms } of calls) {
    assert.equal(unavailability(err), 'silent', String(err));
    assert.ok(ms < bound, `ended after ${ms} ms`);
  }
  assert.equal(pool.waitingCount, 0, 'no call is still waiting for a slot');
  assert.equal(pool.totalCount, 0, 'every frozen connection was destroyed');

  proxy.thawAll();
  for (let i = 0; i < 20; i++) {
    const rows = await statement<{ v: number }>(pool, { text: 'select $1::int as v', values: [i] });
    assert.equal(rows[0]!.v, i);
  }
  await Promise.all(
    Array.from({ length: max + 2 }, () => statement(pool, { text: 'select pg_sleep(0.05)' })),
  );
  assert.ok(pool.totalCount <= max, `${pool.totalCount} connections`);
  assert.equal(pool.waitingCount, 0);
  assert.equal(pool.idleCount, pool.totalCount, 'every connection came back to the pool');
});

test('a backend terminated right after its startup, its FATAL read together with its ReadyForQuery, does not end the process: the checkout connects again', async () => {
  // The faults test's flake: pg-pool takes its error listener off a new
  // client as it hands it out, so an error message in the same read as the
  // connect's ReadyForQuery was emitted with no listener (an uncaught
  // exception). Here the proxy holds the server's last startup messages
  // until the backend was terminated, then passes them and the FATAL in one
  // write.
  const proxy = await proxied();
  const app = `conductor-startup-${randomBytes(4).toString('hex')}`;
  const pool = poolVia(proxy, { max: 1, applicationName: app });
  const uncaught: unknown[] = [];
  const onUncaught = (err: unknown) => uncaught.push(err);
  process.on('uncaughtException', onUncaught);
  after(() => process.off('uncaughtException', onUncaught));

  // The client's last message of the startup: with a password, SCRAM's
  // client-final (it starts "c=biws" without TLS); without one (a server
  // that trusts loopback, as CI's PostgreSQL 15 does), the startup message
  // itself, which carries the application name. The server's answer to it
  // ends the startup.
  const lastStartupMessage = new URL(db.url).password ? 'c=biws' : app;
  const holding = proxy.once(lastStartupMessage, 'hold-replies');
  const answer = statement<{ v: number }>(pool, { text: 'select 4 as v' });
  await holding;
  const pid = await until('the backend waits for its first query', async () => {
    const { rows } = await db.pool.query<{ pid: number }>(
      `select pid from pg_stat_activity where application_name = $1 and state = 'idle'`,
      [app],
    );
    return rows[0]?.pid;
  });
  await db.pool.query('select pg_terminate_backend($1)', [pid]);
  await until('the terminated backend closed its connection', () =>
    proxy.held().some((h) => h.serverClosed),
  );
  proxy.releaseReplies();

  const rows = await answer;
  assert.equal(rows[0]!.v, 4, 'the call was served on a fresh connection');
  assert.equal(proxy.accepted(), 2, 'it connected again');
  assert.deepEqual(uncaught, [], 'no error went unheard');
  assert.equal(pool.totalCount, 1);
});
