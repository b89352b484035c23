import assert from 'node:assert/strict';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, test } from 'node:test';
import { lambdaDispatcher } from '../../lib/app/dispatch.ts';

// A stand-in for the Lambda service: a real HTTP server on loopback that
// records the Invoke requests the SDK sends.
const seen: { method: string; url: string; headers: IncomingHttpHeaders; body: string }[] = [];
const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    seen.push({
      method: req.method ?? '',
      url: req.url ?? '',
      headers: req.headers,
      body: Buffer.concat(chunks).toString('utf8'),
    });
    res.writeHead(202, { 'content-type': 'application/json' });
    res.end();
  });
});
await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
after(() => new Promise<void>((r) => server.close(() => r())));

test('a compile is dispatched as an asynchronous (Event) invocation of the compile function', async () => {
  const { port } = server.address() as AddressInfo;
  const dispatch = lambdaDispatcher('conductor-compile', {
    endpoint: `http://127.0.0.1:${port}`,
    region: 'eu-west-1',
    credentials: { accessKeyId: 'AKIDLOCAL', secretAccessKey: 'local-secret' },
  });
  await dispatch('0b7d5b2e-1111-4222-8333-944445555666');
  assert.equal(seen.length, 1);
  const call = seen[0]!;
  assert.equal(call.method, 'POST');
  assert.equal(call.url, '/2015-03-31/functions/conductor-compile/invocations');
  assert.equal(call.headers['x-amz-invocation-type'], 'Event');
  assert.match(String(call.headers.authorization), /^AWS4-HMAC-SHA256 Credential=AKIDLOCAL\//);
  assert.deepEqual(JSON.parse(call.body), { job_id: '0b7d5b2e-1111-4222-8333-944445555666' });
});
