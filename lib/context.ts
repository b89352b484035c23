// What every function needs at run time, built once per Lambda container (or
// once by the local stack): configuration, the pool, the keyring and the admin
// token. Deployed, the database credentials and the app's keys come from
// Secrets Manager at cold start, never from plain environment variables.
// Nothing here imports the Lambda client or the compiler: the functions that
// do not dispatch compiles stay small (see lib/app/dispatch.ts).
import { type Config, ConfigError, loadConfig } from './config.ts';
import { iamPassword } from './db/iam-token.ts';
import { createPool, type Pool, setPreparedStatements } from './db/index.ts';
import type { Providers } from './fleet/provider.ts';
import { allowPrivateForges } from './forge/client.ts';
import { IdleGate } from './idle/gate.ts';
import type { WebhookIntake } from './idle/intake.ts';
import { log } from './log.ts';
import type { Pickup } from './pickup/index.ts';
import { type Keyring, parseKeyring } from './secrets.ts';
import type { BlobStore } from './storage/store.ts';

export interface AppContext {
  config: Config;
  pool: Pool;
  keyring: Keyring;
  adminToken: string;
  /** How to start a compile; unset: lib/app/dispatch.ts decides from the configuration. */
  dispatchCompile?: (jobId: string) => Promise<void>;
  /** The idle gate (lib/idle/gate.ts); unset: no gate, claims and sweeps always look. */
  gate?: IdleGate;
  /**
   * Where a webhook goes when the database does not answer in time
   * (lib/idle/intake.ts); lib/app/webhook.ts builds it from the
   * configuration, so only its bundle carries the SQS client. Unset: it waits.
   */
  intake?: WebhookIntake;
  /** Where artifacts and caches are kept; unset: lib/app/artifacts.ts builds it from the configuration. */
  storage?: BlobStore;
  /**
   * Wake-ups for waiting claims (lib/pickup/): the local stack's LISTEN/NOTIFY
   * channel. Unset (Lambda): a claim never waits, runners poll.
   */
  pickup?: Pickup;
  /**
   * The runner pools' providers by name (lib/fleet/); unset: lib/app/pools.ts
   * builds those the configuration allows (`ecs`). The local stack adds `process`.
   */
  fleet?: Providers;
  /** Where a launched runner reaches the control plane when neither a pool's settings.url nor CONDUCTOR_PUBLIC_URL says (the local stack's address). */
  runnerUrl?: string;
}

let current: Promise<AppContext> | undefined;

/** Installs the context (the local stack and tests do; Lambda builds it from the environment). */
export function setContext(ctx: AppContext): void {
  current = Promise.resolve(ctx);
}

/** Forgets the context (tests). */
export function clearContext(): void {
  current = undefined;
}

/** The context, built from the environment on first use in a Lambda container. */
export function getContext(): Promise<AppContext> {
  current ??= contextFromEnv().catch((err) => {
    current = undefined;
    throw err;
  });
  return current;
}

/**
 * Reads a secret through the AWS Parameters and Secrets Lambda extension (a
 * local HTTP endpoint the extension layer serves and caches), which keeps the
 * Secrets Manager SDK out of every bundle.
 */
export async function readSecret(
  arn: string,
  env: NodeJS.ProcessEnv = process.env,
  opts: { raw?: boolean } = {},
): Promise<unknown> {
  const port = env.PARAMETERS_SECRETS_EXTENSION_HTTP_PORT ?? '2773';
  const res = await fetch(
    `http://localhost:${port}/secretsmanager/get?secretId=${encodeURIComponent(arn)}`,
    {
      headers: { 'X-Aws-Parameters-Secrets-Token': env.AWS_SESSION_TOKEN ?? '' },
      signal: AbortSignal.timeout(5_000),
    },
  );
  if (!res.ok) throw new Error(`reading secret ${arn} failed: HTTP ${res.status}`);
  const body = (await res.json()) as { SecretString?: string };
  if (!body.SecretString) throw new Error(`secret ${arn} has no string value`);
  return opts.raw ? body.SecretString : JSON.parse(body.SecretString);
}

interface Credentials {
  databaseUrl: string;
  /** A password made at each connect (IAM database authentication), instead of the URL's. */
  password?: () => Promise<string>;
  adminToken?: string;
  secretKey?: string;
}

/** Reads a secret whose value is a plain string, not JSON (the sealing key's). */
async function readRawSecret(arn: string, env: NodeJS.ProcessEnv): Promise<string> {
  const value = await readSecret(arn, env, { raw: true });
  return String(value);
}

async function credentials(config: Config, env: NodeJS.ProcessEnv): Promise<Credentials> {
  let databaseUrl = config.DATABASE_URL;
  let password: Credentials['password'];
  // TLS verified against the RDS certificate authorities (the Lambda runtime
  // ships them; the stack points NODE_EXTRA_CA_CERTS at them), or, when told
  // so, without checking the chain.
  const sslmode = config.CONDUCTOR_DB_TLS;
  if (!databaseUrl && config.CONDUCTOR_DB_IAM_USER && config.CONDUCTOR_DB_HOST) {
    // The application's role signs in with a token from the function's own
    // IAM role: no password exists to leak, and it cannot change the schema.
    const user = config.CONDUCTOR_DB_IAM_USER;
    const host = config.CONDUCTOR_DB_HOST;
    const port = config.CONDUCTOR_DB_PORT;
    databaseUrl = `postgres://${encodeURIComponent(user)}@${host}:${port}/${encodeURIComponent(config.CONDUCTOR_DB_NAME ?? 'postgres')}?sslmode=${sslmode}`;
    password = iamPassword({ host, port, user }, env);
  } else if (!databaseUrl && config.CONDUCTOR_DB_SECRET_ARN) {
    const db = (await readSecret(config.CONDUCTOR_DB_SECRET_ARN, env)) as {
      username: string;
      password: string;
      host?: string;
      port?: number;
      dbname?: string;
    };
    const host = config.CONDUCTOR_DB_HOST ?? db.host;
    const name = config.CONDUCTOR_DB_NAME ?? db.dbname ?? 'postgres';
    databaseUrl = `postgres://${encodeURIComponent(db.username)}:${encodeURIComponent(db.password)}@${host}:${db.port ?? 5432}/${encodeURIComponent(name)}?sslmode=${sslmode}`;
  }
  let adminToken = config.CONDUCTOR_ADMIN_TOKEN;
  let secretKey = config.CONDUCTOR_SECRET_KEY;
  if (!secretKey && config.CONDUCTOR_SECRET_KEY_ARN) {
    secretKey = (await readRawSecret(config.CONDUCTOR_SECRET_KEY_ARN, env)).trim();
  }
  if ((!adminToken || !secretKey) && config.CONDUCTOR_APP_SECRET_ARN) {
    const app = (await readSecret(config.CONDUCTOR_APP_SECRET_ARN, env)) as {
      admin_token?: string;
      secret_key?: string;
    };
    adminToken ??= app.admin_token;
    secretKey ??= app.secret_key;
  }
  if (!databaseUrl) {
    throw new ConfigError(
      'DATABASE_URL or CONDUCTOR_DB_SECRET_ARN: required outside the local stack',
    );
  }
  return { databaseUrl, password, adminToken, secretKey };
}

// A deployed function is given only the secrets it uses (the heartbeat
// neither key nor admin token, only the api the admin token): what it was not
// given fails where it would be used, naming what is missing.
const missing = (what: string) =>
  new ConfigError(`${what}: required outside the local stack, and not given to this function`);

function unavailableKeyring(): Keyring {
  const fail = () => {
    throw missing('CONDUCTOR_SECRET_KEY or CONDUCTOR_SECRET_KEY_ARN');
  };
  return {
    get primaryId(): string {
      return fail();
    },
    get keys(): ReadonlyMap<string, Buffer> {
      return fail();
    },
  };
}

/**
 * The idle gate the configuration names: S3 deployed, else none. `npm start`
 * has none: its PostgreSQL never pauses, so there is nothing to save.
 */
export async function gateFromConfig(config: Config): Promise<IdleGate | undefined> {
  const opts = { cacheMs: config.CONDUCTOR_GATE_CACHE_MS };
  if (config.CONDUCTOR_GATE_BUCKET) {
    const { S3GateStore } = await import('./idle/s3.ts');
    return new IdleGate(new S3GateStore(config.CONDUCTOR_GATE_BUCKET), opts);
  }
  return undefined;
}

/**
 * Deployed, the GitHub App's settings come from its own secret
 * (CONDUCTOR_GITHUB_APP_SECRET_ARN): the id, the webhook secret, and the
 * private key, written to a file only this process's user may read, which
 * CONDUCTOR_GITHUB_APP_PRIVATE_KEY_FILE then names. Never an environment
 * variable holding the key itself.
 */
async function withGitHubApp(config: Config, env: NodeJS.ProcessEnv): Promise<Config> {
  const arn = config.CONDUCTOR_GITHUB_APP_SECRET_ARN;
  if (!arn || config.CONDUCTOR_GITHUB_APP_PRIVATE_KEY_FILE) return config;
  const app = (await readSecret(arn, env)) as {
    app_id?: unknown;
    private_key?: unknown;
    webhook_secret?: unknown;
  };
  const field = (name: keyof typeof app) => {
    const value = app[name];
    if (typeof value !== 'string' || value === '') {
      throw new ConfigError(`CONDUCTOR_GITHUB_APP_SECRET_ARN: the secret has no "${name}"`);
    }
    return value;
  };
  const { mkdtempSync, writeFileSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const file = join(mkdtempSync(join(tmpdir(), 'conductor-app-')), 'github-app.pem');
  writeFileSync(file, field('private_key'), { mode: 0o600 });
  return loadConfig({
    ...env,
    CONDUCTOR_GITHUB_APP_ID: String(app.app_id ?? ''),
    CONDUCTOR_GITHUB_APP_WEBHOOK_SECRET: field('webhook_secret'),
    CONDUCTOR_GITHUB_APP_PRIVATE_KEY_FILE: file,
  });
}

/** Builds the context of a deployed function from its environment (and Secrets Manager). */
export async function contextFromEnv(env: NodeJS.ProcessEnv = process.env): Promise<AppContext> {
  const config = await withGitHubApp(loadConfig(env), env);
  const creds = await credentials(config, env);
  setPreparedStatements(config.CONDUCTOR_DB_PREPARED_STATEMENTS);
  allowPrivateForges(config.CONDUCTOR_ALLOW_PRIVATE_FORGES);
  const pool: Pool = createPool(
    {
      url: creds.databaseUrl,
      max: config.CONDUCTOR_DB_POOL_MAX,
      connectTimeoutMs: config.CONDUCTOR_DB_CONNECT_TIMEOUT_MS,
      ...(creds.password ? { password: creds.password } : {}),
    },
    (err) => log('warn', 'idle database connection failed', { err }),
  );
  const ctx: AppContext = {
    config,
    pool,
    keyring: creds.secretKey ? parseKeyring(creds.secretKey) : unavailableKeyring(),
    adminToken: '',
    gate: await gateFromConfig(config),
  };
  const { adminToken } = creds;
  Object.defineProperty(ctx, 'adminToken', {
    get() {
      if (!adminToken) throw missing('CONDUCTOR_ADMIN_TOKEN or CONDUCTOR_APP_SECRET_ARN');
      return adminToken;
    },
  });
  return ctx;
}
