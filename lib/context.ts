// What every function needs at run time, built once per Lambda container (or
// once by the local stack): configuration, the pool, the keyring and the admin
// token. Deployed, the database credentials and the app's keys come from
// Secrets Manager at cold start, never from plain environment variables.
// Nothing here imports the Lambda client or the compiler: the functions that
// do not dispatch compiles stay small (see lib/app/dispatch.ts).
import { type Config, ConfigError, loadConfig } from './config.ts';
import { createPool, type Pool, setPreparedStatements } from './db/index.ts';
import { log } from './log.ts';
import { type Keyring, parseKeyring } from './secrets.ts';

export interface AppContext {
  config: Config;
  pool: Pool;
  keyring: Keyring;
  adminToken: string;
  /** How to start a compile; unset: lib/app/dispatch.ts decides from the configuration. */
  dispatchCompile?: (jobId: string) => Promise<void>;
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
  return JSON.parse(body.SecretString);
}

interface Credentials {
  databaseUrl: string;
  adminToken: string;
  secretKey: string;
}

async function credentials(config: Config, env: NodeJS.ProcessEnv): Promise<Credentials> {
  let databaseUrl = config.DATABASE_URL;
  if (!databaseUrl && config.CONDUCTOR_DB_SECRET_ARN) {
    const db = (await readSecret(config.CONDUCTOR_DB_SECRET_ARN, env)) as {
      username: string;
      password: string;
      host?: string;
      port?: number;
      dbname?: string;
    };
    const host = config.CONDUCTOR_DB_HOST ?? db.host;
    const name = config.CONDUCTOR_DB_NAME ?? db.dbname ?? 'postgres';
    // TLS without verifying the certificate chain: the connection stays inside
    // the VPC, and the RDS CA bundle is not shipped in the function.
    databaseUrl = `postgres://${encodeURIComponent(db.username)}:${encodeURIComponent(db.password)}@${host}:${db.port ?? 5432}/${encodeURIComponent(name)}?sslmode=no-verify`;
  }
  let adminToken = config.CONDUCTOR_ADMIN_TOKEN;
  let secretKey = config.CONDUCTOR_SECRET_KEY;
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
  if (!secretKey) {
    throw new ConfigError(
      'CONDUCTOR_SECRET_KEY or CONDUCTOR_APP_SECRET_ARN: required outside the local stack',
    );
  }
  if (!adminToken) {
    throw new ConfigError(
      'CONDUCTOR_ADMIN_TOKEN or CONDUCTOR_APP_SECRET_ARN: required outside the local stack',
    );
  }
  return { databaseUrl, adminToken, secretKey };
}

/** Builds the context of a deployed function from its environment (and Secrets Manager). */
export async function contextFromEnv(env: NodeJS.ProcessEnv = process.env): Promise<AppContext> {
  const config = loadConfig(env);
  const creds = await credentials(config, env);
  setPreparedStatements(config.CONDUCTOR_DB_PREPARED_STATEMENTS);
  const pool: Pool = createPool(
    { url: creds.databaseUrl, max: config.CONDUCTOR_DB_POOL_MAX },
    (err) => log('warn', 'idle database connection failed', { err }),
  );
  return {
    config,
    pool,
    keyring: parseKeyring(creds.secretKey),
    adminToken: creds.adminToken,
  };
}
