import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
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
  // The split layout: the admin token alone, and the sealing key as the raw value.
  'arn:admin': { admin_token: 'admin-token-alone' },
  'arn:key': `${'ab'.repeat(32)}\n`,
  'arn:github-app': {
    app_id: '424242',
    webhook_secret: 'the-app-webhook-secret',
    private_key: generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({
      type: 'pkcs1',
      format: 'pem',
    }),
  },
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
  res.end(
    JSON.stringify({ SecretString: typeof value === 'string' ? value : JSON.stringify(value) }),
  );
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

test('deployed without a database the function fails naming it; without keys, where they are used', async () => {
  await assert.rejects(
    contextFromEnv({}),
    (e) => e instanceof ConfigError && /DATABASE_URL or CONDUCTOR_DB_SECRET_ARN/.test(e.message),
  );
  // The heartbeat is given neither the sealing key nor the admin token: it
  // starts, and only a use of either fails, naming what it was not given.
  const ctx = await contextFromEnv({ DATABASE_URL: 'postgres://x@y/z' });
  try {
    assert.throws(
      () => ctx.keyring.keys,
      (e) =>
        e instanceof ConfigError &&
        /CONDUCTOR_SECRET_KEY or CONDUCTOR_SECRET_KEY_ARN/.test(e.message),
    );
    assert.throws(() => ctx.adminToken, /CONDUCTOR_ADMIN_TOKEN or CONDUCTOR_APP_SECRET_ARN/);
  } finally {
    await ctx.pool.end();
  }
});

test('split secrets: the sealing key from its own secret, the admin token from the app secret', async () => {
  const ctx = await contextFromEnv({
    PARAMETERS_SECRETS_EXTENSION_HTTP_PORT: port,
    DATABASE_URL: 'postgres://x@y/z',
    CONDUCTOR_SECRET_KEY_ARN: 'arn:key',
    CONDUCTOR_APP_SECRET_ARN: 'arn:admin',
  });
  try {
    assert.equal(ctx.adminToken, 'admin-token-alone');
    assert.equal(ctx.keyring.keys.size, 1);
    assert.deepEqual([...ctx.keyring.keys.values()][0], Buffer.from('ab'.repeat(32), 'hex'));
  } finally {
    await ctx.pool.end();
  }
});

test('with an IAM database user, the function connects with a token as that user, verifying TLS', async () => {
  const ctx = await contextFromEnv({
    CONDUCTOR_DB_IAM_USER: 'conductor_app',
    CONDUCTOR_DB_HOST: 'cluster.local',
    CONDUCTOR_DB_NAME: 'conductor',
    CONDUCTOR_DB_TLS: 'verify-full',
    CONDUCTOR_SECRET_KEY: generateKey(),
    AWS_ACCESS_KEY_ID: 'AKIDEXAMPLE',
    AWS_SECRET_ACCESS_KEY: 'secret',
    AWS_SESSION_TOKEN: 'session',
    AWS_REGION: 'eu-west-1',
  });
  try {
    const options = (ctx.pool as unknown as { options: Record<string, unknown> }).options;
    assert.equal(options.connectionString, undefined);
    assert.equal(options.user, 'conductor_app');
    assert.equal(options.host, 'cluster.local');
    assert.equal(options.database, 'conductor');
    assert.deepEqual(options.ssl, { rejectUnauthorized: true });
    const token = await (options.password as () => Promise<string>)();
    assert.match(token, /^cluster\.local:5432\/\?Action=connect&DBUser=conductor_app&/);
    assert.match(token, /X-Amz-Security-Token=session&/);
  } finally {
    await ctx.pool.end();
  }
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

test('deployed, the GitHub App comes from its secret: the key is written to a file only this user reads, never to the environment', async () => {
  const env: NodeJS.ProcessEnv = {
    PARAMETERS_SECRETS_EXTENSION_HTTP_PORT: port,
    CONDUCTOR_DB_SECRET_ARN: 'arn:db',
    CONDUCTOR_SECRET_KEY_ARN: 'arn:key',
    CONDUCTOR_GITHUB_APP_SECRET_ARN: 'arn:github-app',
  };
  const ctx = await contextFromEnv(env);
  try {
    assert.equal(ctx.config.CONDUCTOR_GITHUB_APP_ID, '424242');
    assert.equal(ctx.config.CONDUCTOR_GITHUB_APP_WEBHOOK_SECRET, 'the-app-webhook-secret');
    const file = ctx.config.CONDUCTOR_GITHUB_APP_PRIVATE_KEY_FILE;
    assert.ok(file);
    assert.equal(
      readFileSync(file, 'utf8'),
      (secrets['arn:github-app'] as { private_key: string }).private_key,
    );
    assert.equal(statSync(file).mode & 0o777, 0o600);
    assert.equal(
      Object.values(env).some((v) => v?.includes('PRIVATE KEY')),
      false,
      'the key is in no environment variable',
    );
  } finally {
    await ctx.pool.end();
  }
});
