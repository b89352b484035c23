// The systems Conductor is compared with, each in its own database:
// graphile-worker and pg-boss processing no-op jobs, and a bare
// UPDATE-and-commit loop through `pg` as the physical reference.
import { Logger, run, runMigrations } from 'graphile-worker';
import pg from 'pg';
import PgBoss from 'pg-boss';
import { openServerMeter, type ServerCost } from './server.ts';
import { nowMs, type Rate, rate, sleep } from './util.ts';

// graphile-worker's Logger takes a factory of log functions; this one drops every line.
const logger = new Logger(() => () => {});

/** graphile-worker with its defaults: `run()` with a no-op task at `concurrency`. */
export async function graphileWorker(
  url: string,
  concurrency: number,
  total: number,
  limitMs: number,
): Promise<Rate & { server: ServerCost }> {
  await runMigrations({ connectionString: url, logger });
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(
      `select graphile_worker.add_job('noop', '{}'::json) from generate_series(1, $1::int)`,
      [total],
    );
  } finally {
    await client.end();
  }
  let done = 0;
  const meter = await openServerMeter(url);
  const start = nowMs();
  const runner = await run({
    connectionString: url,
    concurrency,
    // The pool is sized to the concurrency, as for Conductor (the default is 10).
    maxPoolSize: Math.max(10, concurrency),
    noHandleSignals: true,
    logger,
    taskList: {
      noop: async () => {
        done++;
      },
    },
  });
  const deadline = start + limitMs;
  while (done < total && nowMs() < deadline) await sleep(2);
  const ms = nowMs() - start;
  const server = await meter.close(done);
  await runner.stop();
  // Leave nothing queued for a later round.
  const cleanup = new pg.Client({ connectionString: url });
  await cleanup.connect();
  await cleanup.query('delete from graphile_worker._private_jobs').catch(() => {});
  await cleanup.end();
  return { ...rate(done, total, ms, done < total), server };
}

/** pg-boss (v10 API): `concurrency` work() loops on one queue with this batch size and polling interval. */
export async function pgBoss(
  url: string,
  concurrency: number,
  total: number,
  batchSize: number,
  pollingIntervalSeconds: number,
  limitMs: number,
): Promise<Rate> {
  const boss = new PgBoss({
    connectionString: url,
    max: Math.max(10, concurrency),
    supervise: false,
    schedule: false,
  });
  boss.on('error', () => {});
  await boss.start();
  const queue = `noop_${concurrency}_${batchSize}_${Date.now()}`;
  await boss.createQueue(queue);
  for (let i = 0; i < total; i += 500) {
    await boss.insert(
      Array.from({ length: Math.min(500, total - i) }, () => ({ name: queue, data: {} })),
    );
  }
  let done = 0;
  const start = nowMs();
  for (let i = 0; i < concurrency; i++) {
    await boss.work(queue, { batchSize, pollingIntervalSeconds }, async (jobs) => {
      done += jobs.length;
    });
  }
  const deadline = start + limitMs;
  while (done < total && nowMs() < deadline) await sleep(2);
  const ms = nowMs() - start;
  await boss.stop({ graceful: false, wait: true, timeout: 2_000 }).catch(() => {});
  return rate(done, total, ms, done < total);
}

/** The physical reference: each client its own row, UPDATE and commit (autocommit) in a loop. */
export async function bareCommits(url: string, concurrency: number, ms: number): Promise<Rate> {
  const setup = new pg.Client({ connectionString: url });
  await setup.connect();
  await setup.query(
    'create table if not exists bench_counter (id int primary key, n bigint not null)',
  );
  await setup.query(
    'insert into bench_counter select g, 0 from generate_series(1, 64) g on conflict do nothing',
  );
  await setup.end();
  const clients = await Promise.all(
    Array.from({ length: concurrency }, async () => {
      const c = new pg.Client({ connectionString: url });
      await c.connect();
      return c;
    }),
  );
  let n = 0;
  const start = nowMs();
  const deadline = start + ms;
  await Promise.all(
    clients.map(async (c, i) => {
      while (nowMs() < deadline) {
        await c.query('update bench_counter set n = n + 1 where id = $1', [i + 1]);
        n++;
      }
    }),
  );
  const elapsed = nowMs() - start;
  await Promise.all(clients.map((c) => c.end()));
  return rate(n, n, elapsed, false);
}
