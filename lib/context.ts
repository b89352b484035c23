// What every function needs at run time, built once per Lambda container (or
// once by the local stack): configuration, the pool, the keyring, the admin
// token and the way to dispatch a compile.
import { InvokeCommand, LambdaClient, type LambdaClientConfig } from '@aws-sdk/client-lambda';
import { compileJob } from './compile.ts';
import { type Config, ConfigError, loadConfig } from './config.ts';
import { createPool, type Pool } from './db/index.ts';
import { log } from './log.ts';
import { type Keyring, parseKeyring } from './secrets.ts';

export interface AppContext {
  config: Config;
  pool: Pool;
  keyring: Keyring;
  adminToken: string;
  /** Starts the compile of a job, after the caller's transaction committed. */
  dispatchCompile: (jobId: string) => Promise<void>;
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

/** Dispatches compiles through the Lambda client as async (`Event`) invocations. */
export function lambdaDispatcher(
  functionName: string,
  clientConfig: LambdaClientConfig = {},
): (jobId: string) => Promise<void> {
  const client = new LambdaClient(clientConfig);
  return async (jobId) => {
    await client.send(
      new InvokeCommand({
        FunctionName: functionName,
        InvocationType: 'Event',
        Payload: Buffer.from(JSON.stringify({ job_id: jobId })),
      }),
    );
  };
}

/**
 * Compiles in this process, after the caller has answered: the local stack's
 * way, and the fallback when no compile function is configured.
 */
export function inProcessDispatcher(
  ctx: () => Pick<AppContext, 'pool' | 'keyring' | 'config'>,
): (jobId: string) => Promise<void> {
  return async (jobId) => {
    setImmediate(() => {
      const { pool, keyring, config } = ctx();
      compileJob(pool, keyring, config.CONDUCTOR_GITHUB_API_URL, jobId).catch((err) =>
        log('error', 'compile failed; the sweep will dispatch it again', { job_id: jobId, err }),
      );
    });
  };
}

/**
 * Dispatches a compile after the caller's transaction committed. A failure is
 * logged, not raised: the job is recorded, and the sweep dispatches the
 * compile of a job left pending again.
 */
export async function dispatchCompile(ctx: AppContext, jobId: string): Promise<void> {
  try {
    await ctx.dispatchCompile(jobId);
  } catch (err) {
    log('error', 'could not dispatch a compile; the sweep will retry', { job_id: jobId, err });
  }
}

async function contextFromEnv(): Promise<AppContext> {
  const config = loadConfig();
  if (!config.DATABASE_URL) throw new ConfigError('DATABASE_URL: required outside the local stack');
  if (!config.CONDUCTOR_SECRET_KEY) {
    throw new ConfigError('CONDUCTOR_SECRET_KEY: required outside the local stack');
  }
  if (!config.CONDUCTOR_ADMIN_TOKEN) {
    throw new ConfigError('CONDUCTOR_ADMIN_TOKEN: required outside the local stack');
  }
  const pool: Pool = createPool(
    { url: config.DATABASE_URL, max: config.CONDUCTOR_DB_POOL_MAX },
    (err) => log('warn', 'idle database connection failed', { err }),
  );
  const compileFunction = config.CONDUCTOR_COMPILE_FUNCTION;
  const ctx: AppContext = {
    config,
    pool,
    keyring: parseKeyring(config.CONDUCTOR_SECRET_KEY),
    adminToken: config.CONDUCTOR_ADMIN_TOKEN,
    dispatchCompile: async () => {},
  };
  ctx.dispatchCompile = compileFunction
    ? lambdaDispatcher(compileFunction)
    : inProcessDispatcher(() => ctx);
  return ctx;
}
