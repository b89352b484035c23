// A pool on Lambda must let the database pause: sessions end on the server
// after idle_session_timeout, a client that sat idle that long (a frozen
// container's) is never handed out, and a connect that failed is tried once
// more on a fresh connection.
import assert from 'node:assert/strict';
import { createServer, Socket } from 'node:net';
import { after, mock, test } from 'node:test';
import { createPool } from '../../lib/db/index.ts';
import { testDatabase } from '../helpers/db.ts';

const db = await testDatabase(import.meta.filename, { migrate: false });

const pidOf = async (pool: ReturnType<typeof createPool>) =>
  (await pool.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;

test("the application's sessions end on the server after a minute idle, and keep REPEATABLE READ", async () => {
  const pool = createPool({ url: db.url, max: 1 });
  after(() => pool.end());
  const { rows } = await pool.query<{ idle: string; iso: string }>(
    `select current_setting('idle_session_timeout') as idle,
            current_setting('default_transaction_isolation') as iso`,
  );
  assert.deepEqual(rows[0], { idle: '1min', iso: 'repeatable read' });
});

test('a client idle for nearly the idle session timeout is closed, not handed out', async () => {
  const pool = createPool({
    url: db.url,
    max: 1,
    idleTimeoutMs: 600_000,
    idleSessionTimeoutMs: 60_000,
  });
  after(() => pool.end());
  const first = await pidOf(pool);
  assert.equal(await pidOf(pool), first, 'a client used a moment ago is reused');
  // What a frozen container sees on thaw: its pool's timers did not run, and
  // the wall clock moved on past the server's timeout.
  mock.timers.enable({ apis: ['Date'], now: Date.now() + 56_000 });
  let second: number;
  try {
    second = await pidOf(pool);
  } finally {
    mock.timers.reset();
  }
  assert.notEqual(second, first);
  const { rows } = await db.pool.query('select 1 from pg_stat_activity where pid = $1', [first]);
  assert.deepEqual(rows, [], 'the stale session was closed by the pool');
});

/** A TCP relay to the database that cuts the first `refuse` connections at once. */
async function flakyRelay(refuse: number): Promise<{ url: string; accepted: () => number }> {
  const target = new URL(db.url);
  let accepted = 0;
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    sockets.add(client);
    client.on('close', () => sockets.delete(client));
    if (accepted++ < refuse) {
      client.destroy();
      return;
    }
    const upstream = new Socket();
    sockets.add(upstream);
    upstream.connect(Number(target.port || 5432), target.hostname, () => {
      client.pipe(upstream).pipe(client);
    });
    upstream.on('error', () => client.destroy());
    client.on('error', () => upstream.destroy());
  });
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  after(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((done) => server.close(done));
  });
  const port = (server.address() as { port: number }).port;
  const url = new URL(db.url);
  url.hostname = '127.0.0.1';
  url.port = String(port);
  return { url: url.toString(), accepted: () => accepted };
}

test('a connect cut by the network is tried once more on a fresh connection', async () => {
  const relay = await flakyRelay(1);
  const pool = createPool({ url: relay.url, max: 1 });
  after(() => pool.end());
  assert.equal((await pool.query<{ one: number }>('select 1 as one')).rows[0]!.one, 1);
  assert.equal(relay.accepted(), 2);
});

test('without retries, or after the one retry, a failed connect is the error', async () => {
  const none = await flakyRelay(1);
  const strict = createPool({ url: none.url, max: 1, connectRetries: 0 });
  after(() => strict.end());
  await assert.rejects(strict.query('select 1'), /Connection terminated|ECONNRESET/);
  const twice = await flakyRelay(2);
  const pool = createPool({ url: twice.url, max: 1 });
  after(() => pool.end());
  await assert.rejects(pool.query('select 1'), /Connection terminated|ECONNRESET/);
  assert.equal(twice.accepted(), 2);
});
