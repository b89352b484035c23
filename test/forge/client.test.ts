// lib/forge/client.ts: which addresses the control plane refuses to call, and
// how answers are read. The refusals need no network: they happen before any
// connection is opened.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import {
  allowPrivateForges,
  callForge,
  classifyAnswer,
  ForgeRefusedError,
  ForgeTransportError,
} from '../../lib/forge/client.ts';
import { type FakeForge, fakeForge } from './helpers.ts';

let forge: FakeForge;
before(async () => {
  forge = await fakeForge((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end('hello');
  });
});
after(() => forge.close());

async function outcome(url: string): Promise<string> {
  try {
    const answer = await callForge({ url, headers: {}, timeoutMs: 500 });
    return `HTTP ${answer.status}`;
  } catch (err) {
    if (err instanceof ForgeRefusedError) return 'refused';
    if (err instanceof ForgeTransportError) return 'network';
    throw err;
  }
}

test('loopback, private, link-local and reserved addresses are refused, in every spelling', async () => {
  allowPrivateForges(false);
  for (const host of [
    '127.0.0.1',
    '127.1.2.3',
    '10.0.0.7',
    '172.16.5.4',
    '192.168.1.1',
    '169.254.169.254',
    '100.64.0.1',
    '0.0.0.0',
    '224.0.0.1',
    '[::1]',
    '[::]',
    '[::ffff:127.0.0.1]',
    '[::ffff:a9fe:a9fe]',
    '[fd00::1]',
    '[fe80::1]',
    '[64:ff9b::7f00:1]',
    '[2002:a00:1::]',
    'localhost',
  ]) {
    assert.equal(await outcome(`http://${host}:${new URL(forge.base).port}/x`), 'refused', host);
  }
  assert.deepEqual(forge.requests, [], 'nothing was sent');
  const refused = await callForge({ url: 'http://169.254.169.254/latest/', headers: {} }).catch(
    (err: Error) => err.message,
  );
  assert.equal(
    refused,
    'refused to call http://169.254.169.254/latest/: 169.254.169.254 is not a public address (loopback, private or link-local); CONDUCTOR_ALLOW_PRIVATE_FORGES=1 allows it',
  );
});

test('a public address is called: whatever comes back, it is not a refusal', async () => {
  allowPrivateForges(false);
  // Unreachable from a sandbox (a network error), or answered by whatever is
  // in the way: either shows the call was made.
  assert.notEqual(await outcome('http://198.41.0.4:9/'), 'refused');
});

test('with private forges allowed, a name is resolved once and the connection goes to that address', async () => {
  allowPrivateForges(true);
  try {
    const answer = await callForge({
      url: `http://localhost:${new URL(forge.base).port}/ping`,
      headers: { 'User-Agent': 'test' },
    });
    assert.equal(answer.status, 200);
    assert.equal(answer.body?.toString(), 'hello');
    assert.equal(forge.requests.at(-1)?.headers.host, `localhost:${new URL(forge.base).port}`);
  } finally {
    allowPrivateForges(false);
  }
});

test('answers are read one way for every forge call', () => {
  const h = (headers: Record<string, string> = {}) => new Headers(headers);
  assert.equal(classifyAnswer(200, h()), 'ok');
  assert.equal(classifyAnswer(201, h()), 'ok');
  assert.equal(classifyAnswer(404, h()), 'permanent');
  assert.equal(classifyAnswer(401, h()), 'permanent');
  assert.equal(classifyAnswer(403, h()), 'permanent');
  assert.equal(classifyAnswer(403, h({ 'x-ratelimit-remaining': '0' })), 'rate_limited');
  assert.equal(classifyAnswer(403, h({ 'retry-after': '60' })), 'rate_limited');
  assert.equal(classifyAnswer(429, h()), 'rate_limited');
  assert.equal(classifyAnswer(408, h()), 'retryable');
  assert.equal(classifyAnswer(502, h()), 'retryable');
  assert.equal(classifyAnswer(304, h()), 'permanent');
});
