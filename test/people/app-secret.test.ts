// Deployed, the sign-in's client ids and secrets are fields of the app secret
// (Secrets Manager, read through the Lambda extension's local endpoint), not
// environment variables; an environment variable still wins.
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, test } from 'node:test';
import { oauthForge, signInForges } from '../../lib/app/people.ts';
import { loadConfig } from '../../lib/config.ts';
import type { AppContext } from '../../lib/context.ts';

const ARN = 'arn:aws:secretsmanager:eu-west-1:123456789012:secret:conductor-app-AbCdEf';
const asked: string[] = [];
const server = createServer((req, res) => {
  asked.push(new URL(req.url ?? '/', 'http://x').searchParams.get('secretId') ?? '');
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(
    JSON.stringify({
      SecretString: JSON.stringify({
        admin_token: 'not-this-one-000000',
        github_client_id: 'Iv1.fromstore',
        github_client_secret: 'store-secret',
        github_oauth_url: 'https://ghe.example.com',
      }),
    }),
  );
});
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
after(() => new Promise<void>((resolve) => server.close(() => resolve())));
process.env.PARAMETERS_SECRETS_EXTENSION_HTTP_PORT = String((server.address() as AddressInfo).port);

const ctxWith = (env: Record<string, string>) =>
  ({ config: loadConfig({ CONDUCTOR_APP_SECRET_ARN: ARN, ...env }) }) as unknown as AppContext;

test('GitHub is offered from the app secret: its client id, secret and OAuth URL; Gitea, absent there, is not', async () => {
  const ctx = ctxWith({ CONDUCTOR_GITHUB_API_URL: 'https://ghe.example.com/api/v3' });
  assert.deepEqual(await signInForges(ctx), ['github']);
  assert.deepEqual(await oauthForge(ctx, 'github'), {
    forge: 'github',
    oauthUrl: 'https://ghe.example.com',
    apiUrl: 'https://ghe.example.com/api/v3',
    clientId: 'Iv1.fromstore',
    clientSecret: 'store-secret',
    timeoutMs: 5000,
  });
  assert.equal(await oauthForge(ctx, 'gitea'), null);
  assert.equal(await oauthForge(ctx, 'bitbucket'), null);
  assert.ok(asked.includes(ARN));
});

test('an environment variable wins over the app secret', async () => {
  const ctx = ctxWith({
    CONDUCTOR_GITHUB_CLIENT_ID: 'from-env',
    CONDUCTOR_GITHUB_CLIENT_SECRET: 'env-secret',
  });
  const forge = await oauthForge(ctx, 'github');
  assert.equal(forge?.clientId, 'from-env');
  assert.equal(forge?.clientSecret, 'env-secret');
});
