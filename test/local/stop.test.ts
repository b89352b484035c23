// Stopping `npm start` (Ctrl-C, or a test's stack.stop()) while clients are
// connected: a job page open in a browser polls every 1.5 s over one keep-alive
// connection, and a plain server.close() waits on that connection for as long
// as the page stays open. Each test holds a request in flight on purpose at the
// moment stop() is called.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { type AddressInfo, connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { setQuiet } from '../../lib/log.ts';
import { closeLocalServer, createLocalServer, type Handlers } from '../../local/server.ts';
import { startLocalStack } from '../../local/stack.ts';
import { testDatabase } from '../helpers/db.ts';

const db = await testDatabase(import.meta.filename, { migrate: false });
setQuiet(process.env.CONDUCTOR_TEST_LOGS !== '1');

async function stack() {
  const dataDir = await mkdtemp(join(tmpdir(), 'conductor-stop-'));
  after(() => rm(dataDir, { recursive: true, force: true }));
  return startLocalStack(
    { DATABASE_URL: db.url, PORT: '0', CONDUCTOR_DATA_DIR: dataDir },
    { sweep: false },
  );
}

/** A raw keep-alive connection to the stack, collecting what it receives. */
async function open(
  url: string,
): Promise<{ socket: Socket; received: () => string; ended: Promise<void> }> {
  const { port } = new URL(url);
  const socket = connect(Number(port), '127.0.0.1');
  await new Promise<void>((done, fail) => socket.once('connect', done).once('error', fail));
  let data = '';
  socket.on('data', (chunk) => {
    data += chunk.toString();
  });
  const ended = new Promise<void>((done) => socket.once('close', () => done()));
  return { socket, received: () => data, ended };
}

const health = 'GET /v1/health HTTP/1.1\r\nhost: x\r\nconnection: keep-alive\r\n\r\n';
const halfPost =
  'POST /v1/health HTTP/1.1\r\nhost: x\r\nconnection: keep-alive\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{';

test('stop() with a keep-alive client whose request is in flight answers it, closes the connection and returns', async () => {
  const s = await stack();
  const client = await open(s.url);
  // A first request leaves the connection open and idle, as a page's poll does.
  client.socket.write(health);
  while (!client.received().includes('\r\n\r\n')) await new Promise((r) => setTimeout(r, 10));
  assert.match(client.received(), /^HTTP\/1\.1 200/);
  assert.match(client.received(), /connection: keep-alive/i);
  // The next request is in flight (half its body sent) when stop() begins.
  client.socket.write(halfPost);
  await new Promise((r) => setTimeout(r, 50));
  const stopped = s.stop();
  await new Promise((r) => setTimeout(r, 100));
  client.socket.write('}');
  await stopped;
  await client.ended;
  // The request in flight got its answer, which told the client to close.
  const second = client.received().split(/(?=HTTP\/1\.1 )/)[1] ?? '';
  assert.match(second, /^HTTP\/1\.1 \d{3}/, client.received());
  assert.match(second, /connection: close/i);
});

test('the server closes a polled keep-alive connection by itself, with no deadline to force it', async () => {
  // As the job page does: a request every 20 ms on one kept-alive connection,
  // one of them in flight when the close begins. The grace is an hour, so the
  // close can only end by the server closing the connection itself.
  const answered: string[] = [];
  const ok = async () => ({ statusCode: 200, headers: {}, body: 'ok' });
  const handlers = Object.fromEntries(
    ['webhook', 'claim', 'heartbeat', 'logs', 'complete', 'api'].map((fn) => [
      fn,
      async () => {
        await new Promise((r) => setTimeout(r, 30));
        answered.push(fn);
        return ok();
      },
    ]),
  ) as unknown as Handlers;
  const server = createLocalServer(handlers);
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', () => done()));
  const { port } = server.address() as AddressInfo;
  const client = await open(`http://127.0.0.1:${port}`);
  let polling = true;
  const poll = (async () => {
    while (polling && !client.socket.destroyed) {
      client.socket.write(health);
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  while (answered.length < 3) await new Promise((r) => setTimeout(r, 10));
  await closeLocalServer(server, 3_600_000);
  await client.ended;
  polling = false;
  await poll;
  assert.match(client.received(), /connection: close/i);
});

test('stop() with a client that never finishes its request returns once the grace is over', async () => {
  const s = await stack();
  const client = await open(s.url);
  client.socket.write(halfPost);
  await new Promise((r) => setTimeout(r, 50));
  await s.stop();
  await client.ended;
  assert.equal(
    client.received(),
    '',
    'the half-sent request got no answer; its connection was ended',
  );
});

test('stop() with a database connection that is never given back returns after its 10-s wait', async () => {
  const s = await stack();
  const held = await s.context.pool.connect();
  const t0 = Date.now();
  await s.stop();
  const ms = Date.now() - t0;
  assert.ok(
    ms >= 9_000 && ms < 20_000,
    `stop() waited for the connection, then went on (${ms} ms)`,
  );
  held.release();
});
