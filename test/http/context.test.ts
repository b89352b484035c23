import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, test } from 'node:test';
import { ConfigError } from '../../lib/config.ts';
import { contextFromEnv } from '../../lib/context.ts';
import { generateKey } from '../../lib/secrets.ts';

// A stand-in for the AWS Parameters and Secrets Lambda extension: a real HTTP
// server on loopback answering the extension's route.
const secrets: Record<string, unknown> = {
  'arn:db': {
    username: 'conductor',
    password: 'p@ss word',
    host: 'cluster.local',
    port: 5432,
    dbname: 'ignored',
  },
  'arn:app': { admin_token: 'admin-token-from-secrets-manager', secret_key: generateKey() },
};
const tokens: string[] = [];
const server = createServer((req, res) => {
  const url = new URL(req.url ?? '/', 'http://localhost');
  tokens.push(String(req.headers['x-aws-parameters-secrets-token']));
  const value = secrets[url.searchParams.get('secretId') ?? ''];
  if (url.pathname !== '/secretsmanager/get' || value === undefined) {
    res.writeHead(400).end();
    return;
  }
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ SecretString: JSON.stringify(value) }));
});
await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
after(() => new Promise<void>((r) => server.close(() => r())));
const port = String((server.address() as AddressInfo).port);

test('deployed, the database credentials and the app keys come from Secrets Manager', async () => {
  const ctx = await contextFromEnv({
    PARAMETERS_SECRETS_EXTENSION_HTTP_PORT: port,
    AWS_SESSION_TOKEN: 'session-token',
    CONDUCTOR_DB_SECRET_ARN: 'arn:db',
    CONDUCTOR_DB_HOST: 'proxy.local',
    CONDUCTOR_DB_NAME: 'conductor',
    CONDUCTOR_APP_SECRET_ARN: 'arn:app',
  });
  try {
    assert.equal(ctx.adminToken, 'admin-token-from-secrets-manager');
    assert.equal(ctx.keyring.keys.size, 1);
    const url = (ctx.pool as unknown as { options: { connectionString: string } }).options
      .connectionString;
    assert.equal(
      url,
      'postgres://conductor:p%40ss%20word@proxy.local:5432/conductor?sslmode=no-verify',
    );
    assert.deepEqual(tokens, ['session-token', 'session-token']);
  } finally {
    await ctx.pool.end();
  }
});

test('deployed without a database or keys, the function fails naming what is missing', async () => {
  await assert.rejects(
    contextFromEnv({}),
    (e) => e instanceof ConfigError && /DATABASE_URL or CONDUCTOR_DB_SECRET_ARN/.test(e.message),
  );
  await assert.rejects(
    contextFromEnv({ DATABASE_URL: 'postgres://x@y/z' }),
    /CONDUCTOR_SECRET_KEY or CONDUCTOR_APP_SECRET_ARN/,
  );
});

test('a secret the extension cannot read fails the cold start with its ARN', async () => {
  await assert.rejects(
    contextFromEnv({
      PARAMETERS_SECRETS_EXTENSION_HTTP_PORT: port,
      CONDUCTOR_DB_SECRET_ARN: 'arn:missing',
    }),
    /reading secret arn:missing failed: HTTP 400/,
  );
});
