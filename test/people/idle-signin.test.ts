// Signing in with a forge goes on while the idle gate is closed: the gate's
// page answers anonymous visitors of the other pages without the database,
// but /login/{forge} and its callback are a person asking to come in.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import type { Context } from 'aws-lambda';
import { handler } from '../../functions/api.ts';
import { loadConfig } from '../../lib/config.ts';
import { type AppContext, clearContext, setContext } from '../../lib/context.ts';
import { IdleGate, MemoryGateStore } from '../../lib/idle/gate.ts';
import { generateKey, parseKeyring } from '../../lib/secrets.ts';
import { testDatabase } from '../helpers/db.ts';

const db = await testDatabase(import.meta.filename);
const store = new MemoryGateStore();
store.marker = false;
const ctx: AppContext = {
  config: loadConfig({
    DATABASE_URL: db.url,
    CONDUCTOR_GITHUB_CLIENT_ID: 'idle-client',
    CONDUCTOR_GITHUB_CLIENT_SECRET: 'idle-secret',
    CONDUCTOR_GITHUB_OAUTH_URL: 'https://github.example',
  }),
  pool: db.pool,
  keyring: parseKeyring(generateKey()),
  adminToken: 'a'.repeat(32),
  gate: new IdleGate(store, { cacheMs: 0 }),
};
setContext(ctx);
after(() => clearContext());

const lambdaContext = { getRemainingTimeInMillis: () => 30_000 } as unknown as Context;
const get = async (path: string, query = '') =>
  (await handler(
    {
      rawPath: path,
      rawQueryString: query,
      queryStringParameters: Object.fromEntries(new URLSearchParams(query)),
      headers: { host: 'conductor.example' },
      requestContext: { http: { method: 'GET' } },
    } as never,
    lambdaContext,
  )) as { statusCode: number; body?: string; headers?: Record<string, string> };

test('with the gate closed, an anonymous page is the idle page, and sign-in with GitHub still starts and checks its callback', async () => {
  const page = await get('/projects/anything');
  assert.equal(page.statusCode, 200);
  assert.match(page.body ?? '', /Conductor is idle/);

  const start = await get('/login/github', 'next=%2F');
  assert.equal(start.statusCode, 302);
  assert.match(
    start.headers?.location ?? '',
    /^https:\/\/github\.example\/login\/oauth\/authorize\?/,
  );

  const callback = await get('/login/github/callback', 'state=not-ours&code=x');
  assert.equal(callback.statusCode, 400);
  assert.doesNotMatch(callback.body ?? '', /Conductor is idle/);
});
