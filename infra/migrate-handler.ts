// The migrate function: applies the migrations on every deploy whose code
// changed. CloudFormation invokes it directly as a custom resource (no
// provider framework, so no extra Lambda on another runtime), and it answers
// on the pre-signed ResponseURL itself. Invoked by hand with any other event,
// it just migrates and returns the result:
//   aws lambda invoke --function-name <MigrateFunctionName> out.json
import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { CloudFormationCustomResourceEvent, Context } from 'aws-lambda';
import { contextFromEnv } from '../lib/context.ts';
import {
  loadMigrationSet,
  type MigrationSet,
  migrate,
  type Pool,
  transaction,
} from '../lib/db/index.ts';
import { log } from '../lib/log.ts';

// scripts/bundle.ts replaces this with the migrations read at build time (the
// numbered ones and the function files), so the deployed function needs no
// loose .sql files; unbundled (tests), it is undefined and the files are read
// from migrations/.
declare const __CONDUCTOR_MIGRATIONS__: MigrationSet | undefined;

const PHYSICAL_ID = 'conductor-migrations';
// Time kept back to answer CloudFormation before Lambda stops the function:
// without an answer the stack would wait for the custom resource's timeout.
const ANSWER_MARGIN_MS = 15_000;

export interface MigrateOutcome {
  /** Numbered migrations applied, as NNN_name. */
  applied: string[];
  /** Function files applied (new or changed), by name. */
  functions: string[];
  current: number;
}

// Errors that mean "not reachable yet": on the first deploy the proxy's target
// can take minutes to become available after the cluster is, and a paused
// (0 ACU) instance answers 57P03 while it resumes.
const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  '57P03',
]);

/** Whether an error is about reaching the database rather than about the migrations. */
export function isConnectionError(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && (NETWORK_CODES.has(code) || code.startsWith('08'))) return true;
  const message = err instanceof Error ? err.message : '';
  return /timeout exceeded when trying to connect|Connection terminated/i.test(message);
}

/**
 * Applies the migrations the database lacks, retrying while the database is
 * not reachable yet, until `retryUntil` (a Date.now() value).
 */
export async function runMigrations(
  env: NodeJS.ProcessEnv = process.env,
  opts: { retryUntil?: number; retryDelayMs?: number } = {},
): Promise<MigrateOutcome> {
  const delay = opts.retryDelayMs ?? 10_000;
  for (let attempt = 1; ; attempt++) {
    try {
      return await migrateOnce(env);
    } catch (err) {
      if (!isConnectionError(err) || Date.now() + delay > (opts.retryUntil ?? 0)) throw err;
      log('warn', 'the database is not reachable yet; trying again', { attempt, err });
      await sleep(delay);
    }
  }
}

/** The migrations this function applies: inlined by the bundler, else read from migrations/. */
export function carriedMigrations(): MigrationSet {
  return typeof __CONDUCTOR_MIGRATIONS__ === 'undefined'
    ? loadMigrationSet()
    : __CONDUCTOR_MIGRATIONS__;
}

/**
 * The digest scripts/bundle.ts writes beside the bundle, and the stack passes
 * as MigrationsHash: a changed function file changes it too, so the deploy
 * runs this function.
 */
export function migrationsHash(migrations: MigrationSet): string {
  return createHash('sha256').update(JSON.stringify(migrations)).digest('hex');
}

async function migrateOnce(env: NodeJS.ProcessEnv): Promise<MigrateOutcome> {
  const migrations = carriedMigrations();
  // The same context every function builds at cold start: the database secret
  // and host from the environment, and the app secret, which this checks is
  // readable and well formed before any function needs it.
  const ctx = await contextFromEnv(env);
  try {
    const result = await migrate(ctx.pool, migrations, (line) => log('info', line));
    if (env.CONDUCTOR_DB_APP_ROLE) await grantAppRole(ctx.pool, env.CONDUCTOR_DB_APP_ROLE);
    return {
      applied: result.applied.map((m) => `${String(m.id).padStart(3, '0')}_${m.name}`),
      functions: result.functions,
      current: result.current,
    };
  } finally {
    await ctx.pool.end();
  }
}

/**
 * The role the functions connect as (IAM authentication): it may read and
 * write every table and run the schema's functions, and owns nothing, so it
 * cannot create, alter or drop. Run after every migration, as the owner, so
 * tables a migration added are granted too.
 */
export async function grantAppRole(pool: Pool, role: string): Promise<void> {
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(role)) throw new Error(`bad role name ${role}`);
  await transaction(pool, async (tx) => {
    // Roles are cluster-wide: two stacks' migrations on one server would race here.
    await tx.query(`select pg_advisory_xact_lock(hashtext('conductor app role'))`);
    await tx.query(
      `do $$ begin
         if not exists (select 1 from pg_roles where rolname = '${role}') then
           create role ${role} login nosuperuser nocreatedb nocreaterole noinherit;
         end if;
         -- Aurora's role for IAM database authentication (absent elsewhere).
         if exists (select 1 from pg_roles where rolname = 'rds_iam') then
           grant rds_iam to ${role};
         end if;
       end $$`,
    );
    await tx.query(`revoke create on schema public from ${role}`);
    await tx.query(`grant usage on schema public to ${role}`);
    await tx.query(
      `grant select, insert, update, delete on all tables in schema public to ${role}`,
    );
    await tx.query(`grant usage, select, update on all sequences in schema public to ${role}`);
    await tx.query(`grant execute on all functions in schema public to ${role}`);
  });
}

function isCustomResourceEvent(event: unknown): event is CloudFormationCustomResourceEvent {
  const e = event as Partial<CloudFormationCustomResourceEvent> | null;
  return typeof e?.RequestType === 'string' && typeof e.ResponseURL === 'string';
}

/** The custom resource's answer, as CloudFormation reads it from the ResponseURL. */
export function cfnResponse(
  event: CloudFormationCustomResourceEvent,
  status: 'SUCCESS' | 'FAILED',
  reason: string,
  data: Record<string, string> = {},
): string {
  return JSON.stringify({
    Status: status,
    // CloudFormation refuses an answer over 4 KiB; the reason is the part that grows.
    Reason: reason.slice(0, 1000),
    PhysicalResourceId: PHYSICAL_ID,
    StackId: event.StackId,
    RequestId: event.RequestId,
    LogicalResourceId: event.LogicalResourceId,
    Data: data,
  });
}

async function answer(url: string, body: string): Promise<void> {
  // Loaded here, not at the cold start: on Node 22 node:http brings Node's
  // fetch (undici) with it (issue #56, docs/architecture.md "Bundles").
  const { request } = url.startsWith('http:')
    ? await import('node:http')
    : ((await import('node:https')) as unknown as typeof import('node:http'));
  return new Promise((done, fail) => {
    // The pre-signed URL was signed without a content type: send an empty one.
    const req = request(url, {
      method: 'PUT',
      headers: { 'content-type': '', 'content-length': Buffer.byteLength(body) },
      timeout: 10_000,
    });
    req.on('response', (res) => {
      res.resume();
      if (res.statusCode === 200) done();
      else fail(new Error(`CloudFormation's ResponseURL answered HTTP ${res.statusCode}`));
    });
    req.on('timeout', () => req.destroy(new Error("CloudFormation's ResponseURL timed out")));
    req.on('error', fail);
    req.end(body);
  });
}

function timeLeft(context: Context | undefined): number {
  return Math.max((context?.getRemainingTimeInMillis() ?? 15 * 60_000) - ANSWER_MARGIN_MS, 1_000);
}

/** Runs `work`, failing after `ms`; the timer never outlives the call. */
async function within<T>(ms: number, work: Promise<T>): Promise<T> {
  // Past the deadline the work goes on in the background; its outcome no longer matters.
  work.catch(() => {});
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<never>((_, fail) => {
    timer = setTimeout(
      () => fail(new Error('the migrations did not finish before the function timed out')),
      ms,
    );
  });
  try {
    return await Promise.race([work, timedOut]);
  } finally {
    clearTimeout(timer);
  }
}

/** CloudFormation custom resource (Create, Update: migrate; Delete: nothing), or a plain invoke. */
export async function handler(
  event: unknown,
  context?: Context,
): Promise<MigrateOutcome | undefined> {
  const ms = timeLeft(context);
  const retryUntil = Date.now() + ms - 30_000;
  if (!isCustomResourceEvent(event)) return runMigrations(process.env, { retryUntil });
  // Deleting the stack (or this resource) never touches the data.
  if (event.RequestType === 'Delete') {
    await answer(event.ResponseURL, cfnResponse(event, 'SUCCESS', 'nothing to do on delete'));
    return undefined;
  }
  // A rollback: CloudFormation asks for the previous properties while this
  // function still carries the newer migrations. Migrations are never undone
  // (the older code runs against the newer schema), and failing here would
  // leave the stack in UPDATE_ROLLBACK_FAILED.
  const wanted = (event.ResourceProperties as { MigrationsHash?: unknown }).MigrationsHash;
  if (event.RequestType === 'Update' && wanted && wanted !== migrationsHash(carriedMigrations())) {
    log('warn', 'not migrating: the stack asks for other migrations than these (a rollback)');
    await answer(event.ResponseURL, cfnResponse(event, 'SUCCESS', 'rollback: nothing undone'));
    return undefined;
  }
  let body: string;
  try {
    const outcome = await within(ms, runMigrations(process.env, { retryUntil }));
    const applied = outcome.applied.length ? outcome.applied.join(', ') : 'none';
    const functions = outcome.functions.length ? outcome.functions.join(', ') : 'none';
    log('info', 'migrations applied', {
      applied: outcome.applied,
      functions: outcome.functions,
      current: outcome.current,
    });
    const reason = `applied: ${applied}; functions: ${functions}; current: ${outcome.current}`;
    body = cfnResponse(event, 'SUCCESS', reason, {
      Current: String(outcome.current),
      Applied: String(outcome.applied.length),
    });
  } catch (err) {
    log('error', 'migrations failed', { err });
    const message = err instanceof Error ? err.message : String(err);
    body = cfnResponse(event, 'FAILED', `migrations failed: ${message}`);
  }
  await answer(event.ResponseURL, body);
  return undefined;
}
