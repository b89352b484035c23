import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { testStack } from '../helpers/stack.ts';

const stack = await testStack(import.meta.filename);

test('the health check answers once the database does, with the package version, without a token', async () => {
  const res = await stack.call('GET', '/v1/health');
  assert.equal(res.status, 200);
  // The version is package.json's, as `conductor --version` prints it.
  const { version } = JSON.parse(
    readFileSync(new URL('../../package.json', import.meta.url), 'utf8'),
  );
  assert.deepEqual(res.body, { ok: true, version });
});

test('an unknown route is a JSON 404 with a request id', async () => {
  const res = await stack.call('GET', '/v2/whatever');
  assert.equal(res.status, 404);
  assert.equal(res.body.error.code, 'not_found');
  assert.equal(res.body.error.request_id, res.headers.get('x-request-id'));
});
