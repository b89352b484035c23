// The idle gate's S3 requests are signed as the AWS SDK's own signer signs
// them, and the store speaks S3's answers: 404 for a missing marker, an
// error for anything else.
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, test } from 'node:test';
import { SignatureV4 } from '@smithy/signature-v4';
import { signedHeaders } from '../../lib/aws-sign.ts';
import { GATE_KEY, S3GateStore } from '../../lib/idle/s3.ts';
import { Sha256 } from '../helpers/sdk-sha256.ts';

const credentials = {
  accessKeyId: 'AKIDEXAMPLE',
  secretAccessKey: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY',
  sessionToken: 'session/token+x=',
};

for (const [method, body] of [
  ['HEAD', undefined],
  ['GET', undefined],
  ['PUT', '2026-03-04T05:06:07.890Z'],
  ['DELETE', undefined],
] as const) {
  test(`a ${method} of the gate's bucket carries the SDK signer's Authorization`, async () => {
    const date = new Date('2026-03-04T05:06:07.890Z');
    const host = 'conductor-gate.s3.eu-west-1.amazonaws.com';
    const ours = signedHeaders({
      method,
      host,
      path: `/${GATE_KEY}`,
      body,
      service: 's3',
      region: 'eu-west-1',
      credentials,
      date,
    });
    const signer = new SignatureV4({
      credentials,
      region: 'eu-west-1',
      service: 's3',
      sha256: Sha256,
      uriEscapePath: false,
      applyChecksum: true,
    });
    const { authorization, ...unsigned } = ours;
    const theirs = await signer.sign(
      { method, protocol: 'https:', hostname: host, path: `/${GATE_KEY}`, headers: unsigned, body },
      { signingDate: date },
    );
    assert.equal(authorization, theirs.headers.authorization);
  });
}

test('the store reads 404 as missing, 200 as there, and fails on anything else', async () => {
  const seen: { method?: string; url?: string; auth?: string }[] = [];
  let status = 404;
  const server = createServer((req: IncomingMessage, res) => {
    seen.push({ method: req.method, url: req.url, auth: req.headers.authorization });
    req.resume();
    req.on('end', () =>
      res.writeHead(status).end(status >= 400 && status !== 404 ? 'AccessDenied' : ''),
    );
  });
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  after(() => new Promise((done) => server.close(done)));
  const endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const store = new S3GateStore('b', () => ({ ...credentials, region: 'eu-west-1', endpoint }));
  assert.equal(await store.exists(GATE_KEY), false);
  assert.equal(await store.read('workers/ab.json'), undefined);
  status = 200;
  await store.write(GATE_KEY, 'open');
  assert.equal(await store.exists(GATE_KEY), true);
  await store.remove(GATE_KEY);
  status = 403;
  await assert.rejects(store.exists(GATE_KEY), /HTTP 403/);
  assert.deepEqual(
    seen.map((s) => `${s.method} ${s.url}`),
    [
      'HEAD /gate/open',
      'GET /workers/ab.json',
      'PUT /gate/open',
      'HEAD /gate/open',
      'DELETE /gate/open',
      'HEAD /gate/open',
    ],
  );
  assert.ok(seen.every((s) => s.auth?.startsWith('AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/')));
});
