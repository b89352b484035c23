// The S3 store end to end: the local stack with its store switched to S3
// (s3rver on loopback), and the real reference runner moving the bytes to
// and from the presigned URLs; a file over one part goes up in parts.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
// @ts-expect-error s3rver ships no types
import S3rver from 's3rver';
import { S3Store } from '../../lib/storage/s3.ts';
import { testStack } from '../helpers/stack.ts';
import { Fixture } from '../runner/support.ts';

const dir = await mkdtemp(join(tmpdir(), 'conductor-s3rver-e2e-'));
const server = new S3rver({
  address: '127.0.0.1',
  port: 0,
  silent: true,
  directory: dir,
  configureBuckets: [{ name: 'conductor-artifacts' }],
});
const { port } = await server.run();
const client = new S3Client({
  endpoint: `http://127.0.0.1:${port}`,
  region: 'us-east-1',
  forcePathStyle: true,
  credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' },
});
after(async () => {
  client.destroy();
  // Keep-alive sockets (the presigned transfers' clients) would hold close()
  // until they time out, ~40 s of an idle file: nothing is in flight now.
  server.httpServer.closeAllConnections();
  await server.close();
  await rm(dir, { recursive: true, force: true });
});

const stack = await testStack(import.meta.filename);
// S3's smallest part, so that a 12 MiB artifact goes up as a multipart upload.
stack.context.storage = new S3Store({
  bucket: 'conductor-artifacts',
  partBytes: 5 * 1024 * 1024,
  client,
});
const admin = { token: stack.adminToken };

test('through S3: build uploads a 12 MiB artifact in parts, deploy receives it, and the API redirects to S3', async () => {
  const f = await Fixture.create(
    stack,
    's3',
    `  build:
    script:
      - mkdir -p dist && head -c 12582912 /dev/urandom > dist/app.bin && sha256sum dist/app.bin | cut -d' ' -f1 > dist/app.sum
    artifacts:
      paths: [dist]
  deploy:
    needs: [build]
    script:
      - cd "$CONDUCTOR_ARTIFACTS/build/dist" && test "$(sha256sum app.bin | cut -d' ' -f1)" = "$(cat app.sum)" && echo "checksum ok"
    cache:
      key: s3-cache
      paths: [dist]
`,
  );
  await f.runner();
  const jobId = await f.trigger();
  const view = await f.finished(jobId, 60_000);
  assert.equal(view.job.state, 'success', JSON.stringify(view.tasks));
  const deploy = view.tasks.find((t) => t.name === 'deploy')!;
  const log = await f.log(deploy.id);
  assert.match(log, /^checksum ok$/m);

  const { artifacts } = (await stack.call('GET', `/v1/jobs/${jobId}/artifacts`, admin)).body;
  assert.equal(artifacts.length, 1);
  assert.equal(artifacts[0].path, 'build.tar.gz');
  const objects = await client.send(new ListObjectsV2Command({ Bucket: 'conductor-artifacts' }));
  const keys = (objects.Contents ?? []).map((o) => o.Key);
  assert.ok(
    keys.some((k) => k?.startsWith(`artifacts/${f.project}/${jobId}/`)),
    keys.join(', '),
  );

  const redirect = await fetch(`${stack.url}/v1/artifacts/${artifacts[0].id}`, {
    headers: { authorization: `Bearer ${stack.adminToken}` },
    redirect: 'manual',
  });
  assert.equal(redirect.status, 302);
  const location = redirect.headers.get('location')!;
  assert.ok(
    location.startsWith(`http://127.0.0.1:${port}/conductor-artifacts/artifacts/`),
    location,
  );
  assert.match(location, /X-Amz-Expires=300/);
  const res = await fetch(location);
  assert.equal(res.status, 200);
  assert.equal(Number(res.headers.get('content-length')), artifacts[0].size);
});

test('through S3: a test report goes up, is read back by the control plane and deleted once read', async () => {
  const report =
    '<testsuite name="s3"><testcase classname="c" name="ok"/><testcase classname="c" name="bad"><failure message="no"/></testcase></testsuite>';
  const f = await Fixture.create(
    stack,
    's3-reports',
    `  unit:
    script: ["true"]
    reports:
      junit: [out/junit.xml]
`,
    { 'out/junit.xml': report },
  );
  await f.runner();
  const jobId = await f.trigger();
  assert.equal((await f.finished(jobId, 60_000)).job.state, 'success');
  const tests = await stack.call('GET', `/v1/jobs/${jobId}/tests`, admin);
  assert.deepEqual(tests.body.totals, { passed: 1, failed: 1, errored: 0, skipped: 0, time_s: 0 });
  assert.equal(tests.body.tasks[0].failures[0].name, 'bad');
  const objects = await client.send(new ListObjectsV2Command({ Bucket: 'conductor-artifacts' }));
  const keys = (objects.Contents ?? []).map((o) => o.Key ?? '');
  assert.deepEqual(
    keys.filter((k) => k.startsWith(`reports/${f.project}/`)),
    [],
    'the report was deleted once read',
  );
  // The store's read takes at most the bytes asked for, and answers null for no object.
  const store = stack.context.storage as S3Store;
  assert.equal(await store.read('reports/none/none/none', 10), null);
});
