// `npm start` and `conductor server` (local/serve.ts): the whole control
// plane on one machine. An embedded PostgreSQL (or DATABASE_URL), migrations,
// the functions behind a local HTTP server bound to CONDUCTOR_HOST, compiles
// in-process, and the sweep on a timer.
import { existsSync } from 'node:fs';
import { chmod, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { type AddressInfo, createServer } from 'node:net';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { storeOf } from '../lib/app/artifacts.ts';
import { inProcessDispatcher } from '../lib/app/dispatch.ts';
import { ecsProvider } from '../lib/app/fleet-aws.ts';
import { runnerExited } from '../lib/app/pools.ts';
import { runSweep } from '../lib/app/sweep.ts';
import { type Config, loadConfig } from '../lib/config.ts';
import { type AppContext, clearContext, setContext } from '../lib/context.ts';
import {
  createPool,
  type MigrateResult,
  migrate,
  type Pool,
  setPreparedStatements,
} from '../lib/db/index.ts';
import { ProcessProvider } from '../lib/fleet/process.ts';
import { allowPrivateForges } from '../lib/forge/client.ts';
import { newToken } from '../lib/http/auth.ts';
import { log } from '../lib/log.ts';
import { PostgresPickup } from '../lib/pickup/index.ts';
import { generateKey, parseKeyring } from '../lib/secrets.ts';
import { BLOB_PATH, LocalStore } from '../lib/storage/index.ts';
import { TrustedProxies } from './forwarded.ts';
import { startEmbeddedPostgres } from './postgres.ts';
import { closeLocalServer, createLocalServer, type Handlers } from './server.ts';

export interface LocalStack {
  /** Where this machine reaches the server (the bound address; loopback for a wildcard bind). */
  url: string;
  /** The address it is bound to (CONDUCTOR_HOST) and its port. */
  host: string;
  port: number;
  adminToken: string;
  context: AppContext;
  /** Where the database is: the embedded server's data directory, or DATABASE_URL. */
  database: string;
  stop(): Promise<void>;
}

/** A value kept in a file of the data directory, generated on first use. */
async function keptValue(dir: string, file: string, make: () => string): Promise<string> {
  const path = join(dir, file);
  if (existsSync(path)) return (await readFile(path, 'utf8')).trim();
  const value = make();
  await writeFile(path, `${value}\n`, { mode: 0o600 });
  await chmod(path, 0o600);
  return value;
}

/** The migrations' one line: what was applied, or that nothing was. */
export function migrationsLine(result: MigrateResult): string {
  const { applied, functions, current } = result;
  if (applied.length === 0 && functions.length === 0) {
    return `migrations: up to date (migration ${current})`;
  }
  const parts = [
    ...(applied.length ? [`${applied.length} migration${applied.length === 1 ? '' : 's'}`] : []),
    ...(functions.length
      ? [`${functions.length} function${functions.length === 1 ? '' : 's'}`]
      : []),
  ];
  return `migrations: applied ${parts.join(' and ')}, now at migration ${current}`;
}

/** Refuses, in one line, a port something on this machine already listens on. */
async function portIsFree(host: string, port: number): Promise<void> {
  const probe = createServer();
  await new Promise<void>((done, fail) => {
    probe.once('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'EADDRINUSE') {
        fail(
          new Error(
            `port ${port} on ${host} is in use (another conductor server?): stop what listens there, or pick another port with --port or PORT`,
          ),
        );
      } else fail(err);
    });
    probe.listen(port, host, () => probe.close(() => done()));
  });
}

/**
 * Holds the data directory for this server (`server.pid`, made exclusively):
 * a second server on it is refused in one line before it starts its own
 * PostgreSQL on the same cluster. A file left by a server that is gone is
 * taken over. Answers the release.
 */
async function lockDataDir(dataDir: string): Promise<() => Promise<void>> {
  const path = join(dataDir, 'server.pid');
  for (let tries = 0; ; tries++) {
    try {
      await writeFile(path, `${process.pid}\n`, { flag: 'wx', mode: 0o600 });
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST' || tries > 0) throw err;
      const holder = Number.parseInt(await readFile(path, 'utf8').catch(() => ''), 10);
      if (Number.isInteger(holder) && holder > 0 && holder !== process.pid && alive(holder)) {
        throw new Error(
          `another conductor server (pid ${holder}) uses the data directory ${dataDir}: stop it first, or give this one another CONDUCTOR_DATA_DIR`,
        );
      }
      await rm(path, { force: true });
    }
  }
  return async () => {
    const holder = await readFile(path, 'utf8').catch(() => '');
    if (holder.trim() === String(process.pid)) await rm(path, { force: true });
  };
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it exists, as another user.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The host part of a URL that reaches a server bound to `host` from this machine. */
function reachable(host: string): string {
  if (host === '0.0.0.0') return '127.0.0.1';
  if (host === '::') return '[::1]';
  return host.includes(':') ? `[${host}]` : host;
}

async function loadHandlers(): Promise<Handlers> {
  const [webhook, claim, heartbeat, logs, complete, api] = await Promise.all([
    import('../functions/webhook.ts'),
    import('../functions/claim.ts'),
    import('../functions/heartbeat.ts'),
    import('../functions/logs.ts'),
    import('../functions/complete.ts'),
    import('../functions/api.ts'),
  ]);
  return {
    webhook: webhook.handler,
    claim: claim.handler,
    heartbeat: heartbeat.handler,
    logs: logs.handler,
    complete: complete.handler,
    api: api.handler,
  };
}

/**
 * How the local stack starts the reference runner: from source, scripts/runner.ts through
 * tsx's loader; from the package's bundle (which has no tsx), its conductor-runner.mjs beside it.
 */
export function runnerCommand(): string[] {
  if (!import.meta.url.endsWith('.ts')) {
    return [process.execPath, fileURLToPath(new URL('./conductor-runner.mjs', import.meta.url))];
  }
  return [
    process.execPath,
    '--import',
    import.meta.resolve('tsx'),
    fileURLToPath(new URL('../scripts/runner.ts', import.meta.url)),
  ];
}

/**
 * Starts the local stack; `env` defaults to the process environment.
 * `ephemeral`: the embedded cluster is throwaway (fsync off, deleted by stop).
 */
export async function startLocalStack(
  env: NodeJS.ProcessEnv = process.env,
  opts: {
    sweep?: boolean;
    ephemeral?: boolean;
    pickup?: boolean;
    requestLog?: boolean;
    /**
     * Told, for a person, one line for the migrations (and anything the
     * embedded PostgreSQL made as root); without it they are log lines.
     */
    say?: (line: string) => void;
  } = {},
): Promise<LocalStack> {
  const config: Config = loadConfig(env);
  const dataDir = resolve(config.CONDUCTOR_DATA_DIR);
  // Before anything is made or started: a port someone holds, or a data
  // directory another server of this machine uses, is one clear line.
  if (config.PORT !== 0) await portIsFree(config.CONDUCTOR_HOST, config.PORT);
  await mkdir(dataDir, { recursive: true });
  const unlock = config.DATABASE_URL ? async () => {} : await lockDataDir(dataDir);
  const adminToken =
    config.CONDUCTOR_ADMIN_TOKEN ?? (await keptValue(dataDir, 'admin-token', () => newToken('ca')));
  const secretKey =
    config.CONDUCTOR_SECRET_KEY ?? (await keptValue(dataDir, 'secret-key', generateKey));

  let stopDatabase = async () => {};
  let databaseUrl = config.DATABASE_URL;
  let database = 'DATABASE_URL';
  if (!databaseUrl) {
    let server: Awaited<ReturnType<typeof startEmbeddedPostgres>>;
    try {
      server = await startEmbeddedPostgres({
        dataDir: join(dataDir, 'pg'),
        ephemeral: opts.ephemeral,
        removeOnStop: opts.ephemeral,
        ...(opts.say ? { say: opts.say } : {}),
      });
    } catch (err) {
      await unlock();
      throw err;
    }
    const admin = createPool({ url: server.url(), max: 1 });
    try {
      const { rows } = await admin.query("select 1 from pg_database where datname = 'conductor'");
      if (rows.length === 0) await server.createDatabase('conductor');
    } finally {
      await admin.end();
    }
    databaseUrl = server.url('conductor');
    database = `embedded PostgreSQL in ${server.dataDir} (port ${server.port})`;
    stopDatabase = async () => {
      await server.stop();
      await unlock();
    };
  }

  setPreparedStatements(config.CONDUCTOR_DB_PREPARED_STATEMENTS);
  allowPrivateForges(config.CONDUCTOR_ALLOW_PRIVATE_FORGES);
  const pool: Pool = createPool({ url: databaseUrl, max: config.CONDUCTOR_DB_POOL_MAX }, (err) =>
    log('warn', 'idle database connection failed', { err }),
  );
  try {
    const say = opts.say;
    const notes: string[] = [];
    const result = await migrate(pool, undefined, (line) => {
      if (!say) log('info', line);
      else if (!line.startsWith('applied ')) notes.push(line);
    });
    for (const note of notes) say?.(note);
    say?.(migrationsLine(result));
  } catch (err) {
    await pool.end();
    await stopDatabase();
    throw err;
  }

  // Long polls (POST /v1/runner/claim?wait=N) wait on LISTEN/NOTIFY: a
  // connection of its own, outside the pool, shared by every waiting claim
  // of this process; other server processes on the database hear it too.
  const pickup =
    opts.pickup === false
      ? undefined
      : new PostgresPickup({ url: databaseUrl, notifyVia: (sql) => pool.query(sql) });
  await pickup?.start();
  const context: AppContext = {
    config,
    pool,
    keyring: parseKeyring(secretKey),
    adminToken,
    ...(pickup ? { pickup } : {}),
  };
  context.dispatchCompile = inProcessDispatcher(() => context);
  setContext(context);

  // Artifacts and caches: S3 when a bucket is configured, else a directory
  // here whose signed URLs this server serves (lib/storage/local.ts).
  const store = storeOf(context);
  const blobs =
    store instanceof LocalStore ? { prefix: BLOB_PATH, serve: store.serve.bind(store) } : undefined;
  context.storage = store;
  const server = createLocalServer(await loadHandlers(), {
    blobs,
    proxies: new TrustedProxies(config.CONDUCTOR_TRUSTED_PROXIES),
    requestLog: opts.requestLog,
  });
  try {
    await new Promise<void>((done, fail) => {
      server.once('error', fail);
      server.listen(config.PORT, config.CONDUCTOR_HOST, () => done());
    });
  } catch (err) {
    clearContext();
    await pickup?.close();
    await pool.end();
    await stopDatabase();
    throw err;
  }
  const { port } = server.address() as AddressInfo;

  // Runner pools' `process` provider (docs/runner.md, "Runner pools"): the
  // reference runner as child processes of this one. It starts nothing
  // until a pool names it.
  const runners = new ProcessProvider(runnerCommand());
  runners.onExit = (launchId, ref) => void runnerExited(context, launchId, ref);
  context.fleet = { process: runners, ecs: ecsProvider(context) };
  context.runnerUrl = `http://127.0.0.1:${port}`;

  let sweeping: Promise<unknown> | undefined;
  const timer =
    opts.sweep === false
      ? undefined
      : setInterval(() => {
          // A sweep still running when the next is due is not doubled, and
          // each sweep stops taking new work when the next one is due.
          sweeping ??= runSweep(context, {
            deadline: Date.now() + config.CONDUCTOR_SWEEP_INTERVAL_S * 1000,
          })
            .catch((err) => log('error', 'sweep failed', { err }))
            .finally(() => {
              sweeping = undefined;
            });
        }, config.CONDUCTOR_SWEEP_INTERVAL_S * 1000);

  return {
    url: `http://${reachable(config.CONDUCTOR_HOST)}:${port}`,
    host: config.CONDUCTOR_HOST,
    port,
    adminToken,
    context,
    database,
    async stop() {
      if (timer) clearInterval(timer);
      // Launched runners first, while the server can take their give-backs.
      await runners.stopAll();
      // Waiting long polls end (answered 204) before the server closes.
      await pickup?.close();
      await closeLocalServer(server);
      await sweeping;
      // Let in-process compiles started by the last requests finish.
      await new Promise((r) => setTimeout(r, 50));
      clearContext();
      // pool.end() waits for every checked-out connection to come back; one
      // held by a request that never ends must not hold the stop with it.
      let waiting: NodeJS.Timeout | undefined;
      const ended = await Promise.race([
        pool.end().then(() => true),
        new Promise<false>((done) => {
          waiting = setTimeout(() => done(false), 10_000);
        }),
      ]);
      clearTimeout(waiting);
      if (!ended) {
        log('warn', 'stopping with database connections still in use', {
          in_use: pool.totalCount - pool.idleCount,
        });
      }
      await stopDatabase();
    },
  };
}
