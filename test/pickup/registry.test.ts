// The push channel's connection registry read back while sockets close: an
// entry listed and then deleted answers 404, or 403 where the reader may list
// only the prefix (S3 answers a missing key 403 to a principal without
// s3:ListBucket on it, as the hint senders are deployed). Such an entry is
// gone; the others still get their hint. s3rver answers neither 403 nor a
// delete between list and read on cue, so this is an S3 on loopback that does.
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, test } from 'node:test';
import { type Connection, S3ConnectionRegistry } from '../../lib/channel/registry.ts';

const BUCKET = 'gate';
const scope: Connection['scope'] = {
  worker: 'a1b2c3d4e5f60718',
  labels: [],
  untrusted: false,
  projects: '*',
};
const entry = (id: string): Connection => ({ id, scope });
const keyOf = (id: string) => `channel/${Buffer.from(id, 'utf8').toString('base64url')}.json`;

/** What the fake answers a GET of each key: 200 with the entry, or a status. */
let objects = new Map<string, Connection | 403 | 404>();
const reads: string[] = [];
const server = createServer((req, res) => {
  const url = new URL(req.url ?? '/', 'http://s3');
  assert.match(String(req.headers.authorization), /^AWS4-HMAC-SHA256 Credential=AKIDTEST\//);
  if (url.pathname === `/${BUCKET}/` && url.searchParams.get('list-type') === '2') {
    assert.equal(url.searchParams.get('prefix'), 'channel/');
    const keys = [...objects.keys()].map((k) => `<Contents><Key>${k}</Key></Contents>`).join('');
    res.writeHead(200, { 'content-type': 'application/xml' });
    res.end(`<?xml version="1.0"?><ListBucketResult>${keys}</ListBucketResult>`);
    return;
  }
  const key = decodeURIComponent(url.pathname.slice(`/${BUCKET}/`.length));
  reads.push(key);
  const found = objects.get(key);
  if (found === undefined || found === 404) {
    res.writeHead(404).end('<Error><Code>NoSuchKey</Code></Error>');
  } else if (found === 403) {
    res.writeHead(403).end('<Error><Code>AccessDenied</Code></Error>');
  } else {
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(found));
  }
});
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
after(() => server.close());
const endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
const registry = new S3ConnectionRegistry(BUCKET, () => ({
  accessKeyId: 'AKIDTEST',
  secretAccessKey: 'secret',
  region: 'eu-west-1',
  endpoint,
}));

test('a connection deleted between the list and its read is left out, the others are hinted', async () => {
  objects = new Map<string, Connection | 403 | 404>([
    [keyOf('open-1'), entry('open-1')],
    [keyOf('closed-403'), 403],
    [keyOf('closed-404'), 404],
    [keyOf('open-2'), entry('open-2')],
  ]);
  reads.length = 0;
  const listed = await registry.list();
  assert.deepEqual(listed.map((c) => c.id).sort(), ['open-1', 'open-2']);
  assert.equal(reads.length, 4, 'every listed entry was read');
});

test('a registry none of whose entries can be read is an error, not an empty list', async () => {
  objects = new Map<string, Connection | 403 | 404>([
    [keyOf('a'), 403],
    [keyOf('b'), 403],
  ]);
  await assert.rejects(registry.list(), /HTTP 403/);
});

test('an empty registry lists nothing', async () => {
  objects = new Map();
  assert.deepEqual(await registry.list(), []);
});
