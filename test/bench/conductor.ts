// Conductor's side of the benchmark: task cycles at the library level and
// through the local HTTP server, the HTTP ceiling, empty claims and their WAL,
// claim latency against history, job shapes, and webhook to first claimable task.
import type { AddressInfo } from 'node:net';
import type pg from 'pg';
import {
  createPool,
  migrate,
  type Pool,
  RETRYABLE_SQLSTATES,
  sqlState,
} from '../../lib/db/index.ts';
import { signBody } from '../../lib/forge/webhook.ts';
import { type HttpEvent, httpFunction, type Reply } from '../../lib/http/index.ts';
import { claimTask, completeTask } from '../../lib/scheduler/index.ts';
import type { TaskSpec } from '../../lib/scheduler/types.ts';
import { closeLocalServer, createLocalServer, type Handlers } from '../../local/server.ts';
import { type LocalStack, startLocalStack } from '../../local/stack.ts';
import { sha as shaOf } from '../e2e/payloads.ts';
import { giteaPush } from '../forge/fixtures/gitea.ts';
import { makeProject, makeWorker, spec, startedJob } from '../helpers/fixtures.ts';
import { openServerMeter, type ServerCost } from './server.ts';
import { type HttpClient, httpClient, nowMs, percentile, type Rate, rate, sleep } from './util.ts';

let labels = 0;
/** A label no earlier run used: each run claims only its own tasks. */
const freshLabel = () => `bench${++labels}-${process.pid}`;

export type Shape = 'jobs' | 'wide' | 'fan';

/** Task specs of one job: `n` independent tasks (in `group` when given), or 1 → n-2 → 1. */
function jobSpecs(n: number, label: string, fan: boolean, group?: string): TaskSpec[] {
  if (!fan) {
    // A group of its own per job, with a slot per task: the check runs on every
    // claim, and the group never holds a task back (its cost, not its queue).
    const concurrency = group ? { group, limit: n, mode: 'queue' as const } : null;
    return Array.from({ length: n }, (_, i) => spec(`t${i}`, { labels: [label], concurrency }));
  }
  const middle = Array.from({ length: n - 2 }, (_, i) =>
    spec(`m${i}`, { labels: [label], needs: ['root'] }),
  );
  return [
    spec('root', { labels: [label] }),
    ...middle,
    spec('tail', { labels: [label], needs: middle.map((t) => t.name) }),
  ];
}

/** Queues `total` no-op tasks: jobs of `jobSize`, one job of all, or one fan-out/fan-in job. */
export async function queueTasks(
  pool: Pool,
  total: number,
  shape: Shape,
  jobSize: number,
  groups = false,
): Promise<string> {
  const label = freshLabel();
  const project = await makeProject(pool, { cancelSuperseded: false });
  if (shape === 'jobs') {
    for (let done = 0; done < total; done += jobSize) {
      const group = groups ? `g${done}` : undefined;
      await startedJob(
        pool,
        project,
        jobSpecs(Math.min(jobSize, total - done), label, false, group),
      );
    }
  } else {
    await startedJob(pool, project, jobSpecs(total, label, shape === 'fan'));
  }
  return label;
}

export interface CycleResult extends Rate {
  /** Claim calls made (successful or empty). */
  claims: number;
  /** 40001/40P01 retries reported by claimTask's onRetries. */
  retries: number;
  /**
   * 40001/40P01 failures of the follow-up's settle (the statements calling
   * conductor_settle after an outcome committed), each one run again by
   * statement(); counted on the pool's connections. Library cycles only.
   */
  settleRetries?: number;
  /** Exceptions out of claim or complete (should stay 0). */
  errors: number;
  /** The server's WAL and CPU per completed cycle over the loop (library cycles only). */
  server?: ServerCost;
}

/** Tasks queued and workers registered for a cycle run, on a pool of `concurrency`. */
interface CycleSetup {
  url: string;
  pool: Pool;
  label: string;
  workers: string[];
  settles: SettleRetries;
}

interface SettleRetries {
  count: number;
}

/** The statements that settle: the success procedure, the follow-up, the settle after a promotion. */
const SETTLING = /conductor_(settle|follow_up|finish_success)\(/;

/**
 * Counts, on every connection `pool` opens from now on, the statements that
 * call conductor_settle (in the success procedure, the follow-up's one
 * statement, and the settle after a promotion) and fail with 40001/40P01 in
 * it. The library retries each at once (lib/db/statement.ts) and reports
 * none, so the bench watches the client's queries.
 */
function countSettleRetries(pool: Pool): SettleRetries {
  const counter = { count: 0 };
  pool.on('connect', (client) => {
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    (client as { query: unknown }).query = (...args: unknown[]) => {
      const result = query(...args);
      const q = args[0] as string | { text?: string } | undefined;
      const text = typeof q === 'string' ? q : q?.text;
      if (SETTLING.test(text ?? '') && result instanceof Promise) {
        result.catch((err: unknown) => {
          // The success procedure's 40001 counts when its settle raised it
          // (the error's context names the function), not its success.
          const where = String((err as { where?: unknown }).where ?? '');
          const settle =
            !text?.includes('conductor_finish_success') || where.includes('conductor_settle');
          if (settle && RETRYABLE_SQLSTATES.has(sqlState(err) ?? '')) counter.count++;
        });
      }
      return result;
    };
  });
  return counter;
}

async function setUpCycles(
  url: string,
  concurrency: number,
  total: number,
  shape: Shape,
  jobSize: number,
  groups = false,
): Promise<CycleSetup> {
  const pool = createPool({ url, max: concurrency });
  const settles = countSettleRetries(pool);
  try {
    const label = await queueTasks(pool, total, shape, jobSize, groups);
    const workers: string[] = [];
    for (let i = 0; i < concurrency; i++) workers.push(await makeWorker(pool, [label]));
    return { url, pool, label, workers, settles };
  } catch (err) {
    await pool.end();
    throw err;
  }
}

/** How a cycle loop claims and completes: the library's calls, or the floor's statements. */
interface CycleOps {
  /** Claims one task for the worker, or null; reports each call to `onRetries`. */
  claim(
    workerId: string,
    label: string,
    onRetries: (retries: number) => void,
  ): Promise<{ id: string; lease_id: string | null } | null>;
  complete(workerId: string, task: { id: string; lease_id: string | null }): Promise<unknown>;
}

const libraryOps = (pool: Pool): CycleOps => ({
  claim: (workerId, label, onRetries) => claimTask(pool, workerId, [label], { onRetries }),
  complete: (workerId, task) =>
    completeTask(pool, { workerId, taskId: task.id, leaseId: task.lease_id!, outcome: 'success' }),
});

/**
 * One loop per worker, claiming and completing (`ops`, the library's by
 * default) until `total` were claimed or the limit. With `measureServer`, the server's WAL and CPU over the loop
 * (only for a loop that has the server to itself: the A/B rounds run two).
 */
async function runCycles(
  { url, pool, label, workers, settles }: CycleSetup,
  total: number,
  limitMs: number,
  measureServer = false,
  ops: CycleOps = libraryOps(pool),
): Promise<CycleResult> {
  let claimed = 0;
  let completed = 0;
  let claims = 0;
  let retries = 0;
  let errors = 0;
  const onRetries = (r: number) => {
    claims++;
    retries += r;
  };
  settles.count = 0;
  const meter = measureServer ? await openServerMeter(url) : undefined;
  const start = nowMs();
  const deadline = start + limitMs;
  await Promise.all(
    workers.map(async (workerId) => {
      while (claimed < total && nowMs() < deadline) {
        let task: Awaited<ReturnType<CycleOps['claim']>>;
        try {
          task = await ops.claim(workerId, label, onRetries);
        } catch {
          errors++;
          continue;
        }
        if (!task) {
          await sleep(1);
          continue;
        }
        claimed++;
        try {
          await ops.complete(workerId, task);
          completed++;
        } catch {
          errors++;
        }
      }
    }),
  );
  const ms = nowMs() - start;
  const server = await meter?.close(completed);
  return {
    ...rate(completed, total, ms, completed < total),
    claims,
    retries,
    settleRetries: settles.count,
    errors,
    server,
  };
}

/**
 * Library level: `concurrency` loops on one pool of that size, each claiming
 * and completing until every task was claimed, or until the deadline.
 */
export async function libraryCycles(
  url: string,
  concurrency: number,
  total: number,
  shape: Shape,
  jobSize: number,
  limitMs: number,
): Promise<CycleResult> {
  const setup = await setUpCycles(url, concurrency, total, shape, jobSize);
  try {
    return await runCycles(setup, total, limitMs, true);
  } finally {
    await setup.pool.end();
  }
}

// The floor (issue #36): the cycle's two writes and nothing else, on the
// library's own tables. A claim is one plain UPDATE of the oldest queued task
// the labels allow (FOR UPDATE SKIP LOCKED, the claim index's order), a
// success one plain UPDATE under the lease: no attempt row, no walk, no
// takeover, scope or group check, no job or project read, no follow-up. At
// READ COMMITTED, as graphile-worker runs, so that no 40001 retry counts;
// with the claim function's planner settings, so that the claim walks the
// index as the function does.
const FLOOR_CLAIM = `update tasks t
   set state = 'running', attempt = t.attempt + 1, lease_id = gen_random_uuid(), worker_id = $1,
       lease_expires_at = now() + interval '10 minutes', started_at = now()
 where t.id = (select c.id from tasks c
                where c.state = 'queued' and c.trusted and c.labels <@ $2::text[]
                order by c.trusted, c.job_created_at, c.position
                limit 1
                for update skip locked)
returning t.id, t.lease_id`;
const FLOOR_SUCCESS = `update tasks set state = 'success', lease_expires_at = null, finished_at = now()
 where id = $1 and lease_id = $2 and state = 'running'`;
const FLOOR_SESSION = `set default_transaction_isolation = 'read committed';
  set plan_cache_mode = force_generic_plan; set enable_sort = off; set enable_bitmapscan = off`;

/**
 * The floor's cycles: `concurrency` loops of the floor's claim and success
 * on one pool, over the tasks `queueTasks` makes, with the server's cost.
 * A reference like the bare commits: what today's task table costs a cycle
 * before any of the product's bookkeeping.
 */
export async function floorCycles(
  url: string,
  concurrency: number,
  total: number,
  jobSize: number,
  limitMs: number,
): Promise<CycleResult> {
  const setup = await setUpCycles(url, concurrency, total, 'jobs', jobSize);
  const { pool } = setup;
  const prepared = new WeakSet<object>();
  const run = async <R extends pg.QueryResultRow>(
    name: string,
    text: string,
    values: unknown[],
  ) => {
    const client = await pool.connect();
    try {
      if (!prepared.has(client)) {
        await client.query(FLOOR_SESSION);
        prepared.add(client);
      }
      return (await client.query<R>({ name, text, values })).rows;
    } finally {
      client.release();
    }
  };
  const floorOps: CycleOps = {
    async claim(workerId, label, onRetries) {
      const [task] = await run<{ id: string; lease_id: string }>('floor_claim', FLOOR_CLAIM, [
        workerId,
        [label],
      ]);
      onRetries(0);
      return task ?? null;
    },
    complete: (_workerId, task) => run('floor_success', FLOOR_SUCCESS, [task.id, task.lease_id]),
  };
  try {
    return await runCycles(setup, total, limitMs, true, floorOps);
  } finally {
    await pool.end();
  }
}

/** The runner's claim → complete loop over HTTP, `tokens.length` runners at once. */
async function httpLoop(
  client: HttpClient,
  tokens: string[],
  total: number,
  limitMs: number,
): Promise<{ result: Rate; errors: number }> {
  let claimed = 0;
  let completed = 0;
  let errors = 0;
  const start = nowMs();
  const deadline = start + limitMs;
  await Promise.all(
    tokens.map(async (token) => {
      const auth = { authorization: `Bearer ${token}` };
      while (claimed < total && nowMs() < deadline) {
        const res = await client.call('POST', '/v1/runner/claim', {}, auth);
        if (res.status === 204) {
          await sleep(1);
          continue;
        }
        if (res.status !== 200) {
          errors++;
          continue;
        }
        claimed++;
        const task = (JSON.parse(res.body) as { task: { id: string; lease_id: string } }).task;
        const done = await client.call(
          'POST',
          `/v1/runner/tasks/${task.id}/complete`,
          { lease_id: task.lease_id, outcome: 'success' },
          auth,
        );
        if (done.status === 200) completed++;
        else errors++;
      }
    }),
  );
  return { result: rate(completed, total, nowMs() - start, completed < total), errors };
}

/** Starts the local stack on `url` with a database pool of `poolMax` connections. */
export function startStack(url: string, dataDir: string, poolMax: number): Promise<LocalStack> {
  return startLocalStack(
    {
      DATABASE_URL: url,
      PORT: '0',
      CONDUCTOR_DATA_DIR: dataDir,
      CONDUCTOR_DB_POOL_MAX: String(poolMax),
      // webhookLatency's fake forge is on loopback.
      CONDUCTOR_ALLOW_PRIVATE_FORGES: '1',
    },
    { sweep: false },
  );
}

/** Registers a worker through the API; answers its id and token. */
async function apiWorker(
  client: HttpClient,
  adminToken: string,
  label: string,
): Promise<{ id: string; token: string }> {
  const res = await client.call(
    'POST',
    '/v1/workers',
    { name: `bench-${label}`, labels: [label] },
    { authorization: `Bearer ${adminToken}` },
  );
  if (res.status !== 201) throw new Error(`worker registration answered ${res.status} ${res.body}`);
  const body = JSON.parse(res.body) as { worker: { id: string }; token: string };
  return { id: body.worker.id, token: body.token };
}

/** Through the local HTTP server: runners over keep-alive connections, the stack's pool sized to the concurrency. */
export async function httpCycles(
  url: string,
  dataDir: string,
  concurrency: number,
  total: number,
  jobSize: number,
  limitMs: number,
): Promise<CycleResult> {
  const stack = await startStack(url, dataDir, concurrency);
  const client = httpClient(stack.url, concurrency);
  try {
    const label = await queueTasks(stack.context.pool, total, 'jobs', jobSize);
    const tokens: string[] = [];
    for (let i = 0; i < concurrency; i++) {
      tokens.push((await apiWorker(client, stack.adminToken, label)).token);
    }
    const { result, errors } = await httpLoop(client, tokens, total, limitMs);
    return { ...result, claims: 0, retries: 0, errors };
  } finally {
    client.close();
    await stack.stop();
  }
}

/**
 * The HTTP ceiling: the same local server and middleware answering claim and
 * complete from handlers that return a fixed task and never touch Postgres.
 */
export async function httpCeiling(
  concurrency: number,
  total: number,
  limitMs: number,
): Promise<CycleResult> {
  const task = {
    id: '00000000-0000-4000-8000-000000000001',
    job_id: '00000000-0000-4000-8000-000000000002',
    name: 't0',
    lease_id: '00000000-0000-4000-8000-000000000003',
    attempt: 1,
    max_attempts: 3,
    lease_expires_at: new Date().toISOString(),
    image: null,
    script: ['true'],
    env: {},
    secrets: {},
    matrix: {},
    needs_outputs: {},
    timeout_s: 3600,
    repo: { url: 'https://forge.test/acme/x', sha: 'a'.repeat(40), ref: 'refs/heads/main' },
  };
  const fixed = (reply: Reply) =>
    httpFunction(async (_event: HttpEvent) => reply, { maxBodyBytes: 8 * 1024 * 1024 });
  const claim = fixed({ status: 200, body: { task } });
  const complete = fixed({ status: 200, body: { state: 'success', job_state: null } });
  const other = fixed({ status: 404, body: {} });
  const handlers: Handlers = {
    webhook: other,
    claim,
    heartbeat: other,
    logs: other,
    complete,
    api: other,
  };
  const server = createLocalServer(handlers);
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', () => done()));
  const { port } = server.address() as AddressInfo;
  const client = httpClient(`http://127.0.0.1:${port}`, concurrency);
  try {
    const tokens = Array.from({ length: concurrency }, (_, i) => `cw_fixed${i}`);
    const { result, errors } = await httpLoop(client, tokens, total, limitMs);
    return { ...result, claims: 0, retries: 0, errors };
  } finally {
    client.close();
    await closeLocalServer(server);
  }
}

export interface EmptyClaims {
  concurrency: number;
  perSecond: number;
  /** Tasks of other labels queued while the claims ran (0: an empty queue). */
  backlog: number;
}

/**
 * Claims of a label nothing carries, for `ms` milliseconds, at `concurrency`,
 * beside `backlog` queued tasks of another label (a runner polling while the
 * queue holds only work for other runners: every claim walks past them).
 */
export async function emptyClaimRate(
  url: string,
  concurrency: number,
  ms: number,
  backlog = 0,
): Promise<EmptyClaims> {
  const pool = createPool({ url, max: concurrency });
  try {
    if (backlog > 0) await queueTasks(pool, backlog, 'jobs', 10);
    const label = freshLabel();
    const worker = await makeWorker(pool, [label]);
    let n = 0;
    const start = nowMs();
    const deadline = start + ms;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (nowMs() < deadline) {
          await claimTask(pool, worker, [label]);
          n++;
        }
      }),
    );
    return { concurrency, perSecond: n / ((nowMs() - start) / 1000), backlog };
  } finally {
    await pool.end();
  }
}

export interface EmptyWal {
  claims: number;
  /** WAL bytes the whole server wrote while the claims ran, after a checkpoint and a warm-up. */
  walBytes: number;
  /** The same for the warm-up round right after the checkpoint (first-touch hint bits). */
  warmupWalBytes: number;
}

/** WAL written by `n` empty library claims in steady state. */
export async function emptyClaimWal(url: string, n: number): Promise<EmptyWal> {
  const pool = createPool({ url, max: 1 });
  const admin = createPool({ url, max: 1 });
  const lsn = async () =>
    (await admin.query<{ l: string }>('select pg_current_wal_insert_lsn()::text as l')).rows[0]!.l;
  const diff = async (a: string, b: string) =>
    Number(
      (await admin.query<{ d: string }>('select pg_wal_lsn_diff($2, $1)::text as d', [a, b]))
        .rows[0]!.d,
    );
  // The WAL position is the whole server's: autovacuum is off for the window
  // (the bench's own throwaway server, reset after) and the step waits for
  // any worker still running, so that no database's vacuum counts against
  // the claims. Before, only this database's tables were vacuumed first, and
  // the first full run with the floor's database (its loops leave dead rows
  // in a database of their own) read 201,272 bytes over 2,000 claims, where
  // every run before read 0.
  await admin.query('alter system set autovacuum = off');
  await admin.query('select pg_reload_conf()');
  try {
    for (let i = 0; i < 600; i++) {
      const { rows } = await admin.query<{ n: number }>(
        `select count(*)::int as n from pg_stat_activity where backend_type = 'autovacuum worker'`,
      );
      if (rows[0]!.n === 0) break;
      await sleep(100);
    }
    const label = freshLabel();
    const worker = await makeWorker(pool, [label]);
    await admin.query('vacuum analyze tasks');
    await admin.query('vacuum analyze jobs');
    await admin.query('checkpoint');
    const w0 = await lsn();
    for (let i = 0; i < 200; i++) await claimTask(pool, worker, [label]);
    const w1 = await lsn();
    for (let i = 0; i < n; i++) await claimTask(pool, worker, [label]);
    const w2 = await lsn();
    return { claims: n, walBytes: await diff(w1, w2), warmupWalBytes: await diff(w0, w1) };
  } finally {
    await admin.query('alter system reset autovacuum').catch(() => {});
    await admin.query('select pg_reload_conf()').catch(() => {});
    await pool.end();
    await admin.end();
  }
}

export interface Latency {
  history: number;
  samples: number;
  p50: number;
  p99: number;
}

/** Adds `count` finished tasks (jobs of 10) to the history, set-based. */
export async function addHistory(pool: Pool, from: number, count: number): Promise<void> {
  const project = 'bench-history';
  await pool.query(
    `insert into projects (id, name, forge, repo, repo_url, webhook_secret_enc)
     values ($1, $1, 'github', 'acme/history', 'https://forge.test/acme/history', 'sealed')
     on conflict (id) do nothing`,
    [project],
  );
  const firstJob = from / 10 + 1;
  const lastJob = (from + count) / 10;
  await pool.query(
    `insert into jobs (project_id, number, state, trigger, ref, sha, trusted,
                       created_at, started_at, finished_at)
     select $1, g, 'success', 'push', 'refs/heads/main', repeat('a', 40), true,
            now() - interval '2 days' + g * interval '1 ms',
            now() - interval '2 days' + g * interval '1 ms',
            now() - interval '2 days' + g * interval '1 ms' + interval '1 minute'
       from generate_series($2::int, $3::int) g`,
    [project, firstJob, lastJob],
  );
  await pool.query(
    `insert into tasks (job_id, position, name, base_name, script, state, attempt, max_attempts,
                        timeout_s, job_created_at, queued_at, started_at, finished_at, trusted)
     select j.id, p, 't' || p, 't' || p, '{true}', 'success', 1, 3, 3600, j.created_at,
            j.started_at, j.started_at, j.finished_at, true
       from jobs j cross join generate_series(0, 9) p
      where j.project_id = $1 and j.number between $2 and $3`,
    [project, firstJob, lastJob],
  );
  await pool.query('vacuum analyze jobs');
  await pool.query('vacuum analyze tasks');
}

/** Claim latency at concurrency 1 over `samples` queued tasks (jobs of 10); each is completed untimed. */
export async function claimLatency(
  url: string,
  history: number,
  samples: number,
): Promise<Latency> {
  // Its set-up writes a large history: no request bound on these sessions.
  const pool = createPool({ url, max: 2, statementTimeoutMs: 0, queryTimeoutMs: 0 });
  try {
    const label = await queueTasks(pool, samples, 'jobs', 10);
    const worker = await makeWorker(pool, [label]);
    // A few untimed claims warm the connection and the plan cache.
    const times: number[] = [];
    for (let i = 0; i < samples; i++) {
      const t0 = nowMs();
      const task = await claimTask(pool, worker, [label]);
      const t1 = nowMs();
      if (!task) break;
      if (i >= 5) times.push(t1 - t0);
      await completeTask(pool, {
        workerId: worker,
        taskId: task.id,
        leaseId: task.lease_id!,
        outcome: 'success',
      });
    }
    return {
      history,
      samples: times.length,
      p50: percentile(times, 50),
      p99: percentile(times, 99),
    };
  } finally {
    await pool.end();
  }
}

/** Migrates a fresh database. */
export async function migrated(url: string): Promise<void> {
  const pool = createPool({ url, max: 1 });
  try {
    await migrate(pool, undefined, () => {});
  } finally {
    await pool.end();
  }
}

export interface WebhookLatency {
  samples: number;
  p50: number;
  p99: number;
  failures: number;
}

/**
 * Webhook to first claimable task: a signed Gitea push to the local server, a
 * fake forge serving `.conductor.yml`, and a library claim polled every
 * millisecond until it answers the job's task.
 */
export async function webhookLatency(
  url: string,
  dataDir: string,
  samples: number,
  limitMs: number,
): Promise<WebhookLatency> {
  const { createServer } = await import('node:http');
  const label = freshLabel();
  const pipelineText = `version: 1\nname: bench\ndefaults:\n  labels: [${label}]\ntasks:\n  a:\n    script: [make]\n`;
  const forge = createServer((_req, res) => {
    res.writeHead(200, {
      'content-type': 'text/plain',
      'content-length': Buffer.byteLength(pipelineText),
    });
    res.end(pipelineText);
  });
  await new Promise<void>((done) => forge.listen(0, '127.0.0.1', () => done()));
  const forgeUrl = `http://127.0.0.1:${(forge.address() as AddressInfo).port}`;
  const stack = await startStack(url, dataDir, 10);
  const client = httpClient(stack.url, 4);
  const times: number[] = [];
  let failures = 0;
  try {
    const repo = `bench/hooks${labels}`;
    const admin = { authorization: `Bearer ${stack.adminToken}` };
    const created = await client.call(
      'POST',
      '/v1/projects',
      {
        id: `hooks-${labels}`,
        name: 'hooks',
        forge: 'gitea',
        repo,
        repo_url: `${forgeUrl}/${repo}.git`,
        forge_url: forgeUrl,
      },
      admin,
    );
    if (created.status !== 201) throw new Error(`project: ${created.status} ${created.body}`);
    const secret = (JSON.parse(created.body) as { webhook_secret: string }).webhook_secret;
    const worker = await apiWorker(client, stack.adminToken, label);
    const deadline = nowMs() + limitMs;
    for (let i = 0; i < samples && nowMs() < deadline; i++) {
      const body = Buffer.from(
        JSON.stringify(giteaPush(repo, shaOf(`bench-${label}-${i}`), { ref: `refs/heads/b${i}` })),
      );
      const headers = {
        'user-agent': 'Go-http-client/1.1',
        'X-Gitea-Event': 'push',
        'X-Gitea-Event-Type': 'push',
        'X-Gitea-Delivery': `${label}-${i}`,
        'X-Gitea-Signature': signBody('gitea', body, secret),
      };
      const t0 = nowMs();
      const res = await client.call('POST', '/v1/webhooks/gitea', body, headers);
      if (res.status !== 202) {
        failures++;
        continue;
      }
      let task: Awaited<ReturnType<typeof claimTask>> = null;
      const giveUp = nowMs() + 5_000;
      while (!task && nowMs() < giveUp) {
        task = await claimTask(stack.context.pool, worker.id, [label]);
        if (!task) await sleep(1);
      }
      const t1 = nowMs();
      if (!task) {
        failures++;
        continue;
      }
      times.push(t1 - t0);
      await completeTask(stack.context.pool, {
        workerId: worker.id,
        taskId: task.id,
        leaseId: task.lease_id!,
        outcome: 'success',
      });
    }
  } finally {
    client.close();
    await stack.stop();
    await new Promise<void>((done) => forge.close(() => done()));
  }
  return {
    samples: times.length,
    p50: percentile(times, 50),
    p99: percentile(times, 99),
    failures,
  };
}

export interface LostRunner {
  leaseS: number;
  pollMaxS: number;
  sweepIntervalS: number;
  /** From the lost runner's last heartbeat to the task's next claim, by takeover (no sweep running). */
  takeoverS: number;
  /** The same for a scheduler that relies on the sweep: the first scheduled sweep that finds the expired lease, then the runner's next poll. */
  sweepOnlyS: number;
}

/**
 * A runner's last heartbeat, then silence: an idle runner of the same pool
 * polls at its longest idle interval (the reference runner's --poll-max-s)
 * until it is handed the task, which the claim takes over once the lease has
 * run out; no sweep runs. For the sweep-only figure, a sweep on its schedule
 * (started at a random phase: it does not know when the runner went quiet)
 * would have queued the task again at its first run after the lease ran out,
 * and the runner's next poll after that would have claimed it; the polls are
 * the measured ones, continued until then. One sample, in real time.
 */
export async function lostRunner(
  url: string,
  leaseS: number,
  pollMaxS: number,
  sweepIntervalS: number,
): Promise<LostRunner> {
  const { heartbeat } = await import('../../lib/scheduler/index.ts');
  const pool = createPool({ url, max: 2 });
  try {
    const label = await queueTasks(pool, 1, 'jobs', 1);
    const lost = await makeWorker(pool, [label]);
    const poller = await makeWorker(pool, [label]);
    const task = await claimTask(pool, lost, [label], { leaseS });
    if (!task) throw new Error('nothing to claim');
    await heartbeat(pool, lost, task.id, task.lease_id!, { leaseS });
    const t0 = nowMs();
    const expires = t0 + leaseS * 1000;
    const phase = Math.random() * sweepIntervalS * 1000;
    const sweepAt =
      t0 +
      phase +
      Math.ceil((expires - t0 - phase) / (sweepIntervalS * 1000)) * sweepIntervalS * 1000;
    const polls: number[] = [];
    let taken: number | undefined;
    while (taken === undefined) {
      polls.push(nowMs());
      const got = await claimTask(pool, poller, [label], { leaseS });
      if (got) {
        taken = nowMs();
        await completeTask(pool, {
          workerId: poller,
          taskId: got.id,
          leaseId: got.lease_id!,
          outcome: 'success',
        });
        break;
      }
      await sleep(pollMaxS * 1000);
    }
    while (polls.at(-1)! < sweepAt) {
      await sleep(pollMaxS * 1000);
      polls.push(nowMs());
    }
    const nextPoll = polls.find((p) => p >= sweepAt)!;
    return {
      leaseS,
      pollMaxS,
      sweepIntervalS,
      takeoverS: (taken - t0) / 1000,
      sweepOnlyS: (nextPoll - t0) / 1000,
    };
  } finally {
    await pool.end();
  }
}

export interface TakeoverCost {
  /** Loops per side. */
  concurrency: number;
  /** Tasks queued per side and round (more than the window can finish). */
  tasks: number;
  windowMs: number;
  /** Cycles per second with the claim as migrated (the takeover of expired leases first), per round. */
  withTakeover: number[];
  /** The same, at the same time, with the claim as migration 003 left it (the queue only). */
  queueOnly: number[];
  /** Geometric mean of the per-round ratios withTakeover / queueOnly. */
  ratio: number;
  /** The lowest and highest per-round ratio. */
  spread: [number, number];
}

/**
 * The claim function before the lease takeover (#19): `conductor_claim` as
 * migrations/003_trust.sql creates it, read from that file, so the figure
 * compares against what really ran before migration 004.
 */
export async function claimBeforeTakeover(): Promise<string> {
  const { readFile } = await import('node:fs/promises');
  const { join } = await import('node:path');
  const { MIGRATIONS_DIR } = await import('../../lib/db/migrate.ts');
  const text = await readFile(join(MIGRATIONS_DIR, '003_trust.sql'), 'utf8');
  const fn = /create or replace function conductor_claim\([\s\S]*?\n\$\$;/.exec(text)?.[0];
  if (!fn || fn.includes('lease_expires_at <')) {
    throw new Error('migrations/003_trust.sql: conductor_claim without a lease takeover not found');
  }
  return fn;
}

/**
 * What taking over expired leases costs the claim when no lease has expired
 * (the common case). Each round makes two fresh databases on one server, one
 * with the claim as migrated and one with the claim as it was before
 * migration 004, queues more tasks in each than the window can finish, then
 * runs `concurrency` claim → complete loops on each side at the same time for
 * the same window. Both sides share the machine's every moment (its drift
 * from one measurement to the next is larger than the cost looked for), so
 * the ratio of their rates is the cost; the two halves of the cores each side
 * gets are its own share of the work.
 */
export async function takeoverCost(
  server: {
    url(db: string): string;
    createDatabase(db: string): Promise<void>;
    dropDatabase(db: string): Promise<void>;
  },
  concurrency: number,
  rounds: number,
  tasks: number,
  windowMs: number,
): Promise<TakeoverCost> {
  const before = await claimBeforeTakeover();
  const withTakeover: number[] = [];
  const queueOnly: number[] = [];
  for (let round = 0; round < rounds; round++) {
    const dbs = [`takeover_${round}_on`, `takeover_${round}_off`];
    const setups: CycleSetup[] = [];
    try {
      for (const db of dbs) {
        await server.createDatabase(db);
        await migrated(server.url(db));
      }
      const off = createPool({ url: server.url(dbs[1]!), max: 1 });
      try {
        await off.query(before);
        // The code calls the claim with the caller's lease id and key
        // (migrations/007); 003's claim makes its own lease and ignores keys.
        await off.query(`
          drop function conductor_claim(uuid, text[], integer, uuid, text);
          create function conductor_claim(p_worker uuid, p_labels text[], p_lease_s integer,
                                          p_lease_id uuid, p_key text)
          returns setof conductor_claimed language sql volatile
          as $$ select * from conductor_claim(p_worker, p_labels, p_lease_s) $$`);
      } finally {
        await off.end();
      }
      for (const db of dbs) {
        setups.push(await setUpCycles(server.url(db), concurrency, tasks, 'jobs', 10));
      }
      // Who starts first alternates (the other starts a tick later).
      const order = round % 2 === 0 ? [0, 1] : [1, 0];
      const runs: Promise<CycleResult>[] = [];
      for (const i of order) runs[i] = runCycles(setups[i]!, tasks, windowMs);
      const [on, off2] = await Promise.all(runs);
      for (const r of [on!, off2!]) {
        if (!r.partial || r.errors > 0) {
          throw new Error(
            `round ${round}: ${r.done} of ${r.wanted} tasks in the window (queue more), ${r.errors} errors`,
          );
        }
      }
      withTakeover.push(on!.perSecond);
      queueOnly.push(off2!.perSecond);
    } finally {
      for (const s of setups) await s.pool.end();
      for (const db of dbs) await server.dropDatabase(db).catch(() => {});
    }
  }
  const ratios = withTakeover.map((w, i) => w / queueOnly[i]!);
  const ratio = Math.exp(ratios.reduce((s, x) => s + Math.log(x), 0) / ratios.length);
  return {
    concurrency,
    tasks,
    windowMs,
    withTakeover,
    queueOnly,
    ratio,
    spread: [Math.min(...ratios), Math.max(...ratios)],
  };
}

export interface GroupCost {
  /** Loops per side. */
  concurrency: number;
  tasks: number;
  windowMs: number;
  /** Cycles per second with every task in a concurrency group (a group per job of 10, limit 10), per round. */
  withGroups: number[];
  /** The same, at the same time, on a database whose tasks have no group. */
  withoutGroups: number[];
  /** Geometric mean of the per-round ratios withGroups / withoutGroups. */
  ratio: number;
  spread: [number, number];
}

/**
 * What concurrency groups cost the claim (issue #30): as takeoverCost, two
 * fresh databases per round, both as migrated, one whose tasks are all in
 * concurrency groups (each job of 10 its own group of limit 10, so the group
 * never holds a task back and the cost of the check is what is measured),
 * run at the same time for the same window.
 */
export async function groupCost(
  server: {
    url(db: string): string;
    createDatabase(db: string): Promise<void>;
    dropDatabase(db: string): Promise<void>;
  },
  concurrency: number,
  rounds: number,
  tasks: number,
  windowMs: number,
): Promise<GroupCost> {
  const withGroups: number[] = [];
  const withoutGroups: number[] = [];
  for (let round = 0; round < rounds; round++) {
    const dbs = [`groups_${round}_on`, `groups_${round}_off`];
    const setups: CycleSetup[] = [];
    try {
      for (const db of dbs) {
        await server.createDatabase(db);
        await migrated(server.url(db));
      }
      setups.push(await setUpCycles(server.url(dbs[0]!), concurrency, tasks, 'jobs', 10, true));
      setups.push(await setUpCycles(server.url(dbs[1]!), concurrency, tasks, 'jobs', 10, false));
      const order = round % 2 === 0 ? [0, 1] : [1, 0];
      const runs: Promise<CycleResult>[] = [];
      for (const i of order) runs[i] = runCycles(setups[i]!, tasks, windowMs);
      const [on, off] = await Promise.all(runs);
      for (const r of [on!, off!]) {
        if (!r.partial || r.errors > 0) {
          throw new Error(
            `round ${round}: ${r.done} of ${r.wanted} tasks in the window (queue more), ${r.errors} errors`,
          );
        }
      }
      withGroups.push(on!.perSecond);
      withoutGroups.push(off!.perSecond);
    } finally {
      for (const s of setups) await s.pool.end();
      for (const db of dbs) await server.dropDatabase(db).catch(() => {});
    }
  }
  const ratios = withGroups.map((w, i) => w / withoutGroups[i]!);
  const ratio = Math.exp(ratios.reduce((s, x) => s + Math.log(x), 0) / ratios.length);
  return {
    concurrency,
    tasks,
    windowMs,
    withGroups,
    withoutGroups,
    ratio,
    spread: [Math.min(...ratios), Math.max(...ratios)],
  };
}
