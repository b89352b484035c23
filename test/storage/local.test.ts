// The local store's URLs, which the product signs and verifies itself: a
// URL works for its object, its method, its size and until its expiry, and
// a tampered one, an expired one, or one made for another object is refused.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { BLOB_PATH, LocalStore } from '../../lib/storage/index.ts';

const root = await mkdtemp(join(tmpdir(), 'conductor-local-store-'));
let now = Date.now();
const store = new LocalStore(root, randomBytes(32), () => now);
const server: Server = createServer((req, res) => {
  const path = (req.url ?? '/').split('?')[0]!;
  void store.serve(req, res, path.slice(BLOB_PATH.length));
});
await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
after(async () => {
  await new Promise((done) => server.close(done));
  await rm(root, { recursive: true, force: true });
});

async function upload(key: string, body: Buffer): Promise<Response> {
  const plan = await store.partUrls(key, null, body.length, 60);
  return fetch(new URL(plan.parts[0]!.url, base), { method: 'PUT', body });
}

test('an object goes up through its signed PUT URL and comes down as itself through its GET URL', async () => {
  const body = randomBytes(100_000);
  const put = await upload('artifacts/p/one', body);
  assert.equal(put.status, 200);
  assert.equal(await store.size('artifacts/p/one'), body.length);
  const url = await store.downloadUrl('artifacts/p/one', 'dist/app.bin', 60);
  const got = await fetch(new URL(url, base));
  assert.equal(got.status, 200);
  assert.match(got.headers.get('content-disposition') ?? '', /filename="app.bin"/);
  assert.deepEqual(Buffer.from(await got.arrayBuffer()), body);
});

test('a tampered URL is refused with 403', async () => {
  await upload('artifacts/p/two', Buffer.from('secret build'));
  const url = await store.downloadUrl('artifacts/p/two', 'two', 60);
  const [payload, signature] = url.slice(BLOB_PATH.length).split('.');
  // The payload re-signed by nobody: point the signature at another key.
  const grant = JSON.parse(Buffer.from(payload!, 'base64url').toString());
  grant.k = 'artifacts/p/one';
  const forged = `${BLOB_PATH}${Buffer.from(JSON.stringify(grant)).toString('base64url')}.${signature}`;
  const res = await fetch(new URL(forged, base));
  assert.equal(res.status, 403);
  assert.match(await res.text(), /signature does not match/);
  const flipped = url.slice(0, -2) + (url.endsWith('AA') ? 'BB' : 'AA');
  assert.equal((await fetch(new URL(flipped, base))).status, 403);
});

test("one object's URL never reaches another object, and a download URL does not upload", async () => {
  await upload('artifacts/p/three', Buffer.from('three'));
  await upload('artifacts/p/four', Buffer.from('four'));
  const three = await store.downloadUrl('artifacts/p/three', 'three', 60);
  assert.equal(await (await fetch(new URL(three, base))).text(), 'three');
  const put = await fetch(new URL(three, base), { method: 'PUT', body: 'overwritten' });
  assert.equal(put.status, 403);
  assert.match(await put.text(), /signed for GET, not PUT/);
  assert.equal(await (await fetch(new URL(three, base))).text(), 'three');
});

test('an expired URL is refused with 403', async () => {
  await upload('artifacts/p/five', Buffer.from('five'));
  const url = await store.downloadUrl('artifacts/p/five', 'five', 60);
  now += 61_000;
  try {
    const res = await fetch(new URL(url, base));
    assert.equal(res.status, 403);
    assert.match(await res.text(), /expired/);
  } finally {
    now -= 61_000;
  }
});

test('an upload must be exactly the size its URL was signed for; nothing is kept otherwise', async () => {
  const plan = await store.partUrls('artifacts/p/six', null, 10, 60);
  const url = new URL(plan.parts[0]!.url, base);
  const longer = await fetch(url, { method: 'PUT', body: Buffer.alloc(11) });
  assert.equal(longer.status, 400);
  const shorter = await fetch(url, { method: 'PUT', body: Buffer.alloc(9) });
  assert.equal(shorter.status, 400);
  assert.equal(await store.size('artifacts/p/six'), null);
  assert.equal((await fetch(url, { method: 'PUT', body: Buffer.alloc(10) })).status, 200);
  assert.equal(await store.size('artifacts/p/six'), 10);
});

test('a key the control plane did not make is refused before any file is touched', async () => {
  await assert.rejects(store.partUrls('../etc/passwd', null, 1, 60), /not a storage key/);
  await assert.rejects(store.size('artifacts/../../x'), /not a storage key/);
});
