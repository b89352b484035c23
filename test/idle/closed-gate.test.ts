// A closed idle gate answers strangers without the database (#32): claims
// with an unknown, revoked or known token, a webhook whose signature the
// directory refuses, the health check and anonymous pages. The function's
// pool is replaced by one that records every call and answers none, so "no
// connection" is what these tests see, not what they assume.
import assert from 'node:assert/strict';
import { createHmac, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import type { Context } from 'aws-lambda';
import { handler as apiHandler } from '../../functions/api.ts';
import { handler as claimHandler } from '../../functions/claim.ts';
import { handler as webhookHandler } from '../../functions/webhook.ts';
import { refreshDirectoryEntry } from '../../lib/app/directory.ts';
import { scheduledSweep } from '../../lib/app/sweep.ts';
import { createWorker, revokeWorker } from '../../lib/app/workers.ts';
import { loadConfig } from '../../lib/config.ts';
import { type AppContext, clearContext, setContext } from '../../lib/context.ts';
import type { Pool } from '../../lib/db/index.ts';
import { hashToken } from '../../lib/http/auth.ts';
import { IdleGate, MemoryGateStore, OPEN_KEY } from '../../lib/idle/gate.ts';
import { gateDirectory, MemoryIntake } from '../../lib/idle/intake.ts';
import { WORKERS_SYNCED_KEY } from '../../lib/idle/workers.ts';
import { encrypt, generateKey, parseKeyring } from '../../lib/secrets.ts';
import { githubPush } from '../forge/fixtures/github.ts';
import { testDatabase } from '../helpers/db.ts';

const db = await testDatabase(import.meta.filename);

/** A pool that records each call and answers none (as a paused, unreachable database would not). */
function recordingPool(calls: string[]): Pool {
  return new Proxy({} as Pool, {
    get(_target, prop) {
      if (prop === 'then') return undefined;
      return (..._args: unknown[]) => {
        calls.push(String(prop));
        return Promise.reject(new Error('no database here'));
      };
    },
  });
}

const lambdaContext = { getRemainingTimeInMillis: () => 50_000 } as unknown as Context;
type Answer = { statusCode: number; body?: string; headers?: Record<string, string> };

const claim = async (token: string, body: unknown = {}) =>
  (await claimHandler(
    {
      rawPath: '/v1/runner/claim',
      headers: { authorization: `Bearer ${token}` },
      body: JSON.stringify(body),
      requestContext: { http: { method: 'POST' } },
    } as never,
    lambdaContext,
  )) as Answer;

const get = async (path: string, query?: Record<string, string>) =>
  (await apiHandler(
    {
      rawPath: path,
      headers: { host: 'conductor.example' },
      ...(query ? { queryStringParameters: query } : {}),
      requestContext: { http: { method: 'GET' } },
    } as never,
    lambdaContext,
  )) as Answer;

const REPO = 'acme/idle';
const SECRET = 'the-project-webhook-secret';

const postWebhook = async (payload: unknown, secret: string, delivery: string) => {
  const body = JSON.stringify(payload);
  return (await webhookHandler(
    {
      rawPath: '/v1/webhooks/github',
      headers: {
        'x-github-event': 'push',
        'x-github-delivery': delivery,
        'x-hub-signature-256': `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`,
        'content-type': 'application/json',
      },
      body,
      requestContext: { http: { method: 'POST' }, timeEpoch: Date.parse('2026-12-03T10:00:00Z') },
    } as never,
    lambdaContext,
  )) as Answer;
};

describe('with the gate closed and a pool that answers nothing', () => {
  const keyring = parseKeyring(generateKey());
  const store = new MemoryGateStore();
  const gate = new IdleGate(store, { cacheMs: 0 });
  const intake = new MemoryIntake();
  const calls: string[] = [];
  const ctx: AppContext = {
    config: loadConfig({ DATABASE_URL: db.url }),
    pool: db.pool,
    keyring,
    adminToken: 'a'.repeat(32),
    gate,
    intake,
    dispatchCompile: async () => {},
  };
  let known = '';
  let revoked = '';
  // Registered before the bucket kept tokens: the sweep copies it once.
  const legacy = `cw_${randomBytes(24).toString('base64url')}`;

  before(async () => {
    await db.pool.query(
      `update jobs set state = 'cancelled', finished_at = now() where state in ('pending', 'running')`,
    );
    known = (await createWorker(db.pool, { ...base, name: 'known', labels: ['linux'] }, gate))
      .token;
    const gone = await createWorker(db.pool, { ...base, name: 'gone' }, gate);
    revoked = gone.token;
    await revokeWorker(db.pool, gone.worker.id, gate);
    await db.pool.query(
      `insert into workers (name, token_hash, labels) values ('legacy', $1, '{linux}')`,
      [hashToken(legacy)],
    );
    setContext(ctx);
    // The sweep copies the workers once (the legacy one) and closes the gate.
    const swept = (await scheduledSweep(ctx, { daily: false })) as { gate?: string };
    assert.equal(swept.gate, 'closed');
    assert.equal(store.marker, false);
    assert.ok(store.objects.has(WORKERS_SYNCED_KEY));
    intake.entries.clear();
    await intake.directory.put('github', {
      projectId: 'idle',
      repo: REPO,
      secretEnc: encrypt(keyring, SECRET, 'project/idle/webhook-secret'),
    });
    ctx.pool = recordingPool(calls);
  });
  after(() => clearContext());

  const base = { labels: [], untrusted: false, projects: '*' as const, ephemeral: false };

  test('a claim with an unknown token is answered 401 without a connection', async () => {
    calls.length = 0;
    const answer = await claim(`cw_${randomBytes(24).toString('base64url')}`);
    assert.equal(answer.statusCode, 401, answer.body);
    assert.deepEqual(calls, []);
  });

  test('so is a revoked token, at once (no 12-hour grace)', async () => {
    calls.length = 0;
    assert.equal((await claim(revoked)).statusCode, 401);
    assert.deepEqual(calls, []);
  });

  test('an unknown token with a bad body is still a 401, without a connection', async () => {
    calls.length = 0;
    assert.equal((await claim('cw_nobody', { labels: 'linux' })).statusCode, 401);
    assert.deepEqual(calls, []);
  });

  test('a known token gets 204 without a connection, and 400 for a label it lacks', async () => {
    calls.length = 0;
    assert.equal((await claim(known)).statusCode, 204);
    assert.equal((await claim(known, { labels: ['linux'] })).statusCode, 204);
    const bad = await claim(known, { labels: ['gpu'] });
    assert.equal(bad.statusCode, 400);
    assert.match(bad.body ?? '', /labels\.0/);
    assert.deepEqual(calls, []);
  });

  test('a worker registered before the bucket kept tokens was copied by the sweep: 204 without a connection', async () => {
    calls.length = 0;
    assert.equal((await claim(legacy, { labels: ['linux'] })).statusCode, 204);
    assert.deepEqual(calls, []);
  });

  test('a webhook whose signature the directory refuses is a 401 without a connection', async () => {
    calls.length = 0;
    const answer = await postWebhook(githubPush(REPO), 'not-the-secret', 'forged-1');
    assert.equal(answer.statusCode, 401, answer.body);
    assert.deepEqual(calls, []);
    assert.equal(intake.sent.length, 0, 'nothing queued');
  });

  test('a webhook for a repository the directory does not know is queued with its received time', async () => {
    calls.length = 0;
    const answer = await postWebhook(githubPush('acme/new-here'), 'whatever', 'unknown-1');
    assert.equal(answer.statusCode, 202, answer.body);
    assert.deepEqual(JSON.parse(answer.body!), { queued: true, delivery: 'unknown-1' });
    assert.equal(intake.sent.at(-1)?.receivedAt?.toISOString(), '2026-12-03T10:00:00.000Z');
  });

  test('the health check answers "idle" from the gate, without a connection', async () => {
    const packageVersion = JSON.parse(
      readFileSync(new URL('../../package.json', import.meta.url), 'utf8'),
    ).version;
    calls.length = 0;
    const answer = await get('/v1/health');
    assert.equal(answer.statusCode, 200);
    assert.deepEqual(JSON.parse(answer.body!), { ok: true, version: packageVersion, idle: true });
    assert.deepEqual(calls, []);
  });

  test('anonymous pages (the front page, a job page) say idle, without a connection', async () => {
    calls.length = 0;
    for (const path of ['/', '/jobs/00000000-0000-4000-8000-000000000001', '/projects/x']) {
      const answer = await get(path);
      assert.equal(answer.statusCode, 200, path);
      assert.match(answer.body ?? '', /Conductor is idle/, path);
    }
    assert.deepEqual(calls, []);
  });

  test('with the gate open, the same claim goes to the database', async () => {
    calls.length = 0;
    await gate.open();
    try {
      assert.ok((await claim(known)).statusCode >= 500, 'the recording pool answers nothing');
      assert.ok(calls.length > 0);
    } finally {
      store.objects.delete(OPEN_KEY);
    }
  });
});

describe('the bucket follows the database', () => {
  const keyring = parseKeyring(generateKey());
  const base = { labels: [], untrusted: false, projects: '*' as const, ephemeral: false };

  test('a registration the bucket refuses is revoked again and answered 503; its token never works', async () => {
    const store = new MemoryGateStore();
    store.write = async () => {
      throw new Error('S3 is down');
    };
    const gate = new IdleGate(store, { cacheMs: 0 });
    await assert.rejects(
      createWorker(db.pool, { ...base, name: 'unlucky' }, gate),
      (err: Error) => {
        assert.equal((err as { status?: number }).status, 503);
        assert.match(err.message, /register it again/);
        return true;
      },
    );
    const { rows } = await db.pool.query<{ revoked: boolean }>(
      `select revoked from workers where name = 'unlucky'`,
    );
    assert.deepEqual(rows, [{ revoked: true }]);
  });

  test("a project's new webhook secret is written to the directory before it is answered", async () => {
    const store = new MemoryGateStore();
    const gate = new IdleGate(store, { cacheMs: 0 });
    const id = `dir-${randomBytes(3).toString('hex')}`;
    await db.pool.query(
      `insert into projects (id, name, forge, repo, repo_url, webhook_secret_enc)
       values ($1, $1, 'github', $2, 'https://forge.test/x', $3)`,
      [id, `acme/${id}`, encrypt(keyring, 'new-secret', `project/${id}/webhook-secret`)],
    );
    const ctx = {
      config: loadConfig({ DATABASE_URL: db.url }),
      pool: db.pool,
      keyring,
      adminToken: 'a'.repeat(32),
      gate,
    } satisfies AppContext;
    await refreshDirectoryEntry(ctx, id);
    const entry = await gateDirectory(gate).get('github', `acme/${id}`);
    assert.equal(entry?.projectId, id);
    store.write = async () => {
      throw new Error('S3 is down');
    };
    await assert.rejects(refreshDirectoryEntry(ctx, id), /replace it again/);
  });
});
