import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import type { CloudFormationCustomResourceEvent } from 'aws-lambda';
import {
  handler,
  isConnectionError,
  migrationsHash,
  runMigrations,
} from '../../infra/migrate-handler.ts';
import { loadFunctionFiles, loadMigrationSet, loadMigrations } from '../../lib/db/index.ts';
import { setQuiet } from '../../lib/log.ts';
import { generateKey } from '../../lib/secrets.ts';
import { freePort, startEmbeddedPostgres } from '../../local/postgres.ts';
import { testDatabase } from '../helpers/db.ts';

setQuiet(true);

// Run through `npm test` this uses the run's server; run alone
// (`node --test test/infra/*.test.ts`) it starts an embedded one of its own.
let ownServer: { stop(): Promise<void> } | undefined;
let ownServerDir: string | undefined;
if (!process.env.CONDUCTOR_TEST_ADMIN_URL && !process.env.DATABASE_URL) {
  ownServerDir = mkdtempSync(join(tmpdir(), 'conductor-migrate-pg-'));
  const server = await startEmbeddedPostgres({
    dataDir: join(ownServerDir, 'pg'),
    ephemeral: true,
    // As root the cluster may live under /var/lib/conductor/clusters: gone with the server.
    removeOnStop: true,
  });
  process.env.CONDUCTOR_TEST_ADMIN_URL = server.url();
  ownServer = server;
}
const db = await testDatabase(import.meta.filename, { migrate: false });
after(async () => {
  // Registered after testDatabase's hook, so the database is dropped first.
  await ownServer?.stop();
  if (ownServerDir) rmSync(ownServerDir, { recursive: true, force: true });
});

// A stand-in for the Parameters and Secrets extension, serving the app secret.
const extension = createServer((req, res) => {
  const url = new URL(req.url ?? '/', 'http://localhost');
  if (url.searchParams.get('secretId') !== 'arn:app') {
    res.writeHead(400).end();
    return;
  }
  res.writeHead(200, { 'content-type': 'application/json' });
  const app = { admin_token: 'admin-token-for-the-migrate-test', secret_key: generateKey() };
  res.end(JSON.stringify({ SecretString: JSON.stringify(app) }));
});
// A stand-in for CloudFormation's pre-signed ResponseURL, keeping every answer.
const answers: { headers: IncomingHttpHeaders; body: Record<string, unknown> }[] = [];
const responseUrl = createServer((req, res) => {
  let body = '';
  req.on('data', (d) => {
    body += d;
  });
  req.on('end', () => {
    answers.push({ headers: req.headers, body: JSON.parse(body) as Record<string, unknown> });
    res.writeHead(200).end();
  });
});
const listen = (s: typeof extension) =>
  new Promise<number>((done) =>
    s.listen(0, '127.0.0.1', () => done((s.address() as AddressInfo).port)),
  );
const extensionPort = await listen(extension);
const responsePort = await listen(responseUrl);
after(() => {
  extension.close();
  responseUrl.close();
});

// The function's environment as the stack sets it, but with DATABASE_URL
// naming the test database (the embedded server speaks no TLS).
Object.assign(process.env, {
  DATABASE_URL: db.url,
  CONDUCTOR_APP_SECRET_ARN: 'arn:app',
  PARAMETERS_SECRETS_EXTENSION_HTTP_PORT: String(extensionPort),
  AWS_SESSION_TOKEN: 'session-token',
});

const known = loadMigrations();
let requests = 0;
function event(
  type: 'Create' | 'Update' | 'Delete',
  props: Record<string, string> = {},
): CloudFormationCustomResourceEvent {
  requests++;
  return {
    RequestType: type,
    ServiceToken: 'arn:aws:lambda:eu-west-1:123456789012:function:migrate',
    ResponseURL: `http://127.0.0.1:${responsePort}/answer?request=${requests}`,
    StackId: 'arn:aws:cloudformation:eu-west-1:123456789012:stack/Conductor/guid',
    RequestId: `request-${requests}`,
    LogicalResourceId: 'Migrations',
    ResourceType: 'Custom::ConductorMigrations',
    ResourceProperties: {
      ServiceToken: 'arn:aws:lambda:eu-west-1:123456789012:function:migrate',
      MigrationsHash: migrationsHash(loadMigrationSet()),
      ...props,
    },
    ...(type === 'Create'
      ? {}
      : { PhysicalResourceId: 'conductor-migrations', OldResourceProperties: {} }),
  } as CloudFormationCustomResourceEvent;
}

async function appliedIds(): Promise<number[]> {
  const { rows } = await db.pool.query<{ exists: boolean }>(
    "select to_regclass('conductor_migrations') is not null as exists",
  );
  if (!rows[0]!.exists) return [];
  const ids = await db.pool.query<{ id: number }>(
    'select id from conductor_migrations order by id',
  );
  return ids.rows.map((r) => r.id);
}

test('a rollback (the stack asking for other migrations) answers SUCCESS and migrates nothing', async () => {
  await handler(event('Update', { MigrationsHash: 'f'.repeat(64) }));
  const answer = answers.at(-1)!;
  assert.equal(answer.body.Status, 'SUCCESS');
  assert.match(String(answer.body.Reason), /rollback/);
  assert.deepEqual(await appliedIds(), []);
});

test('a Create applies every migration and answers CloudFormation', async () => {
  await handler(event('Create'));
  const answer = answers.at(-1)!;
  assert.equal(answer.body.Status, 'SUCCESS', String(answer.body.Reason));
  assert.equal(answer.body.PhysicalResourceId, 'conductor-migrations');
  assert.equal(answer.body.RequestId, `request-${requests}`);
  assert.equal(answer.body.LogicalResourceId, 'Migrations');
  assert.deepEqual(answer.body.Data, {
    Current: String(known.length),
    Applied: String(known.length),
  });
  // The pre-signed URL was signed without a content type.
  assert.equal(answer.headers['content-type'], '');
  assert.deepEqual(
    await appliedIds(),
    known.map((m) => m.id),
  );
  const functions = await db.pool.query<{ name: string }>(
    'select name from conductor_functions order by name',
  );
  assert.deepEqual(
    functions.rows.map((r) => r.name),
    loadFunctionFiles().map((f) => f.name),
  );
});

test('an Update with nothing new applies nothing and succeeds', async () => {
  await handler(event('Update', { CodeHash: 'new code' }));
  const answer = answers.at(-1)!;
  assert.equal(answer.body.Status, 'SUCCESS');
  assert.deepEqual(answer.body.Data, { Current: String(known.length), Applied: '0' });
});

test('a database ahead of the code fails the deploy, saying why', async () => {
  await db.pool.query(
    "insert into conductor_migrations (id, name) values ($1, 'from_the_future')",
    [known.length + 1],
  );
  try {
    await handler(event('Update', { CodeHash: 'older code' }));
    const answer = answers.at(-1)!;
    assert.equal(answer.body.Status, 'FAILED');
    assert.match(String(answer.body.Reason), /deploy the newer code/);
  } finally {
    await db.pool.query('delete from conductor_migrations where id = $1', [known.length + 1]);
  }
});

test('a Delete leaves the database alone', async () => {
  await handler(event('Delete'));
  assert.equal(answers.at(-1)!.body.Status, 'SUCCESS');
  assert.deepEqual(
    await appliedIds(),
    known.map((m) => m.id),
  );
});

test('invoked by hand, it migrates and returns what it did', async () => {
  const outcome = await handler({});
  assert.deepEqual(outcome, { applied: [], functions: [], current: known.length });
});

test('a database that is not reachable yet is retried until the deadline', async () => {
  const closed = await freePort();
  const started = Date.now();
  await assert.rejects(
    runMigrations(
      { ...process.env, DATABASE_URL: `postgres://nobody@127.0.0.1:${closed}/conductor` },
      { retryUntil: Date.now() + 300, retryDelayMs: 100 },
    ),
    (err) => isConnectionError(err),
  );
  assert.ok(Date.now() - started >= 200, 'it did not retry');
});

test('connection errors are told apart from migration errors', () => {
  const coded = (code: string) => Object.assign(new Error(code), { code });
  for (const code of ['ECONNREFUSED', 'ETIMEDOUT', 'ENOTFOUND', '57P03', '08006']) {
    assert.equal(isConnectionError(coded(code)), true, code);
  }
  assert.equal(isConnectionError(new Error('timeout exceeded when trying to connect')), true);
  for (const code of ['42601', '23505', '28P01']) {
    assert.equal(isConnectionError(coded(code)), false, code);
  }
  assert.equal(isConnectionError(new Error('migration 3 is "x" in the database')), false);
});
