// Signing in with a forge goes on while the idle gate is closed: the gate's
// page answers anonymous visitors of the other pages without the database,
// but /login/{forge} and its callback are a person asking to come in.
// Starting a sign-in writes nothing (its state travels in a sealed cookie),
// and a callback without a cookie this server sealed is refused before the
// database is asked anything: a stranger does not wake a paused database.
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
// Every use of the pool counted: what a paused database would be woken by.
let poolUses = 0;
const pool = new Proxy(db.pool, {
  get(target, prop, receiver) {
    if (prop === 'query' || prop === 'connect') poolUses++;
    const value = Reflect.get(target, prop, receiver);
    return typeof value === 'function' ? value.bind(target) : value;
  },
});
const ctx: AppContext = {
  config: loadConfig({
    DATABASE_URL: db.url,
    CONDUCTOR_GITHUB_CLIENT_ID: 'idle-client',
    CONDUCTOR_GITHUB_CLIENT_SECRET: 'idle-secret',
    CONDUCTOR_GITHUB_OAUTH_URL: 'https://github.example',
  }),
  pool: pool as never,
  keyring: parseKeyring(generateKey()),
  adminToken: 'a'.repeat(32),
  gate: new IdleGate(store, { cacheMs: 0 }),
};
setContext(ctx);
after(() => clearContext());

const lambdaContext = { getRemainingTimeInMillis: () => 30_000 } as unknown as Context;
const get = async (path: string, query = '', cookie?: string) =>
  (await handler(
    {
      rawPath: path,
      rawQueryString: query,
      queryStringParameters: Object.fromEntries(new URLSearchParams(query)),
      headers: { host: 'conductor.example', ...(cookie ? { cookie } : {}) },
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

test('with the gate closed, starting sign-ins and callbacks without our cookie never reach the database', async () => {
  const before = poolUses;
  let sealed = '';
  for (let i = 0; i < 5; i++) {
    const start = (await get('/login/github', 'next=%2F')) as {
      statusCode: number;
      cookies?: string[];
    };
    assert.equal(start.statusCode, 302);
    sealed = (start.cookies ?? []).find((c) => c.startsWith('conductor_oauth='))!.split(';')[0]!;
    assert.match(sealed, /^conductor_oauth=[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}$/);
  }
  // A cookie changed by one character, or none: refused, and the database not asked.
  const forged = `${sealed.slice(0, -1)}${sealed.endsWith('A') ? 'B' : 'A'}`;
  for (const cookie of [undefined, forged]) {
    const res = await get('/login/github/callback', 'state=x&code=y', cookie);
    assert.equal(res.statusCode, 400);
    assert.match(res.body ?? '', /did not start in this browser/);
  }
  assert.equal(
    poolUses - before,
    0,
    'the pool was used by anonymous visitors behind a closed gate',
  );
  const { rows } = await db.pool.query('select count(*)::int as n from oauth_states');
  assert.equal(rows[0].n, 0);
});
