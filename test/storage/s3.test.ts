// The S3 store over HTTP against s3rver, an S3-compatible server started
// here on loopback. s3rver does not check signatures (tested on the local
// store instead); here: the keys, a presigned URL's expiry, multipart
// uploads, and a stored object's length.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
// @ts-expect-error s3rver ships no types
import S3rver from 's3rver';
import type { UploadPlan } from '../../lib/storage/index.ts';
import { S3Store } from '../../lib/storage/s3.ts';
import { putParts } from '../../runner/artifacts.ts';

const dir = await mkdtemp(join(tmpdir(), 'conductor-s3rver-'));
const server = new S3rver({
  address: '127.0.0.1',
  port: 0,
  silent: true,
  directory: dir,
  configureBuckets: [{ name: 'artifacts' }],
});
const { port } = await server.run();
const endpoint = `http://127.0.0.1:${port}`;
const client = new S3Client({
  endpoint,
  region: 'us-east-1',
  forcePathStyle: true,
  credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' },
});
// Parts of 5 MiB, S3's smallest: a 12 MiB file goes up in three.
const store = new S3Store({
  bucket: 'artifacts',
  prefix: 'c/',
  partBytes: 5 * 1024 * 1024,
  client,
});
after(async () => {
  client.destroy();
  // Keep-alive sockets (the presigned transfers' clients) would hold close()
  // until they time out, ~40 s of an idle file: nothing is in flight now.
  server.httpServer.closeAllConnections();
  await server.close();
  await rm(dir, { recursive: true, force: true });
});

async function fileOf(bytes: Buffer): Promise<string> {
  const file = join(dir, `upload-${randomBytes(4).toString('hex')}`);
  await writeFile(file, bytes);
  return file;
}

test('a small file goes up with one presigned PUT under its key, and downloads as itself', async () => {
  const body = randomBytes(1000);
  const key = 'artifacts/demo/job/one';
  const uploadId = await store.createUpload(key, body.length);
  assert.equal(uploadId, null, 'one part: no multipart upload');
  const plan = await store.partUrls(key, null, body.length, 60);
  assert.equal(plan.parts.length, 1);
  assert.match(plan.parts[0]!.url, /X-Amz-Expires=60/);
  await putParts(endpoint, await fileOf(body), asUpload(plan), AbortSignal.timeout(10_000));
  await store.finishUpload(key, null, []);
  assert.equal(await store.size(key), 1000);

  const listed = await client.send(new ListObjectsV2Command({ Bucket: 'artifacts' }));
  assert.ok(
    listed.Contents?.some((o) => o.Key === 'c/artifacts/demo/job/one'),
    'under the prefix',
  );

  const url = await store.downloadUrl(key, 'dist/app.bin', 60);
  const res = await fetch(url);
  assert.equal(res.status, 200);
  assert.deepEqual(Buffer.from(await res.arrayBuffer()), body);
});

test('a file larger than a part goes up as a multipart upload, a URL per part, completed from their ETags', async () => {
  const body = randomBytes(12 * 1024 * 1024);
  const key = 'caches/demo/big';
  const uploadId = await store.createUpload(key, body.length);
  assert.ok(uploadId, 'a multipart upload was started');
  const plan = await store.partUrls(key, uploadId, body.length, 60);
  assert.deepEqual(
    plan.parts.map((p) => p.size),
    [5 * 1024 * 1024, 5 * 1024 * 1024, 2 * 1024 * 1024],
  );
  const etags = await putParts(
    endpoint,
    await fileOf(body),
    asUpload(plan),
    AbortSignal.timeout(30_000),
  );
  assert.equal(await store.size(key), null, 'nothing is there before the upload is completed');
  await store.finishUpload(key, uploadId, etags);
  assert.equal(await store.size(key), body.length);
  const res = await fetch(await store.downloadUrl(key, 'cache.tar.gz', 60));
  assert.deepEqual(Buffer.from(await res.arrayBuffer()), body);
});

test('an expired presigned URL answers 403', async () => {
  const key = 'artifacts/demo/job/expiring';
  const plan = await store.partUrls(key, null, 3, 1);
  await putParts(
    endpoint,
    await fileOf(Buffer.from('abc')),
    asUpload(plan),
    AbortSignal.timeout(10_000),
  );
  const url = await store.downloadUrl(key, 'x', 1);
  await new Promise((done) => setTimeout(done, 2_100));
  const res = await fetch(url);
  assert.equal(res.status, 403);
});

test("a stored object's length is what the commit checks; deleted objects are gone", async () => {
  const key = 'artifacts/demo/job/len';
  const plan = await store.partUrls(key, null, 5, 60);
  await putParts(
    endpoint,
    await fileOf(Buffer.from('12345')),
    asUpload(plan),
    AbortSignal.timeout(10_000),
  );
  assert.equal(await store.size(key), 5);
  await store.delete([key, 'artifacts/demo/job/never-there']);
  assert.equal(await store.size(key), null);
});

/** A plan as the control plane answers it to the runner. */
function asUpload(plan: UploadPlan): { upload_id: string | null; parts: UploadPlan['parts'] } {
  return { upload_id: plan.uploadId, parts: plan.parts };
}
