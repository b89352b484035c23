// Runner pools by trust, in the claim itself (conductor_claim, migrations/003):
// a worker registered untrusted claims only untrusted tasks and every other
// worker only trusted ones, labels narrow inside a pool and never across, the
// pool is the claim index's leading column, and an empty claim writes nothing.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { loadMigrations, migrate } from '../../lib/db/index.ts';
import { claimTask } from '../../lib/scheduler/index.ts';
import { testDatabase } from '../helpers/db.ts';
import { sha, spec } from '../helpers/fixtures.ts';
import { schedulerDatabase } from '../helpers/scheduler.ts';

const db = await schedulerDatabase(import.meta.filename);
const { pool } = db;

async function untrustedWorker(labels: string[] = []): Promise<string> {
  const id = await db.makeWorker(labels);
  await pool.query('update workers set untrusted = true where id = $1', [id]);
  return id;
}

test('an untrusted worker claims only untrusted tasks, every other worker only trusted ones; labels narrow inside a pool, never across', async () => {
  const project = await db.makeProject();
  const trustedJob = await db.startedJob(project, [
    spec('trusted-any'),
    spec('trusted-gpu', { labels: ['gpu'] }),
  ]);
  const forkJob = await db.startedJob(
    project,
    [spec('fork-any'), spec('fork-gpu', { labels: ['gpu'] })],
    {
      trusted: false,
    },
  );
  const tasks = await db.tasksOf(forkJob.id);
  assert.equal(tasks['fork-any']!.trusted, false, "the tasks carry their job's trust");
  assert.equal((await db.tasksOf(trustedJob.id))['trusted-any']!.trusted, true);

  const untrusted = await untrustedWorker(['gpu']);
  const trusted = await db.makeWorker(['gpu']);
  // Oldest job first, but only within the worker's pool: the trusted job is older.
  assert.equal((await claimTask(pool, untrusted, []))?.name, 'fork-any');
  assert.equal(await claimTask(pool, untrusted, []), null, 'the gpu task needs the gpu label');
  const forkGpu = await claimTask(pool, untrusted, ['gpu']);
  assert.equal(forkGpu?.name, 'fork-gpu');
  assert.equal(forkGpu?.trusted, false);
  assert.equal(await claimTask(pool, untrusted, ['gpu']), null, 'never a trusted task');

  const first = await claimTask(pool, trusted, ['gpu']);
  assert.equal(first?.name, 'trusted-any');
  assert.equal(first?.trusted, true);
  assert.equal((await claimTask(pool, trusted, ['gpu']))?.name, 'trusted-gpu');
  assert.equal(await claimTask(pool, trusted, ['gpu']), null);
});

test('an empty claim writes nothing, also when the other pool has queued tasks; an id that names no worker claims nothing', async () => {
  const project = await db.makeProject();
  await db.startedJob(project, [spec('only-trusted', { labels: ['empty'] })]);
  const untrusted = await untrustedWorker(['empty']);
  const client = await pool.connect();
  try {
    for (const worker of [untrusted, '00000000-0000-4000-8000-000000000000']) {
      await client.query('begin');
      const { rows } = await client.query(
        `select (c.task).id from conductor_claim($1, $2::text[], 60, gen_random_uuid(), null) c`,
        [worker, ['empty']],
      );
      assert.deepEqual(rows, []);
      // A write (a row lock included) would have given the transaction an id.
      const xid = await client.query('select pg_current_xact_id_if_assigned() as xid');
      assert.equal(xid.rows[0].xid, null);
      await client.query('rollback');
    }
  } finally {
    client.release();
  }
  const { rows } = await pool.query("select state, attempt from tasks where name = 'only-trusted'");
  assert.deepEqual(rows, [{ state: 'queued', attempt: 0 }]);
});

test("the claim's candidate query, as installed, walks its own pool in the claim index without sorting", async () => {
  const project = await db.makeProject();
  await db.startedJob(
    project,
    Array.from({ length: 2000 }, (_, i) => spec(`bulk-${i}`, { labels: ['bulk'] })),
  );
  await db.startedJob(project, [spec('bulk-fork', { labels: ['bulk'] })], { trusted: false });
  await pool.query('analyze tasks');
  const { rows } = await pool.query<{ src: string }>(
    "select prosrc as src from pg_proc where proname = 'conductor_claim'",
  );
  assert.equal(rows.length, 1);
  // The query whose rows the claim walks for a queued task (issue #36: a
  // cursor in claim order; a later migration may look elsewhere first).
  const candidate = [...rows[0]!.src.matchAll(/open c_cand for\s*(select[\s\S]*?);\n/g)]
    .map((m) => m[1]!)
    .find((q) => q.includes("t.state = 'queued'"));
  assert.ok(candidate, 'the claim walks queued tasks with one query');
  const query = candidate
    .replace(/v_trusted/g, '$1')
    .replace(/p_labels/g, '$2')
    .replace(/v_worker\.projects/g, '$3')
    .replace(/v_snap/g, '$4')
    .replace(/v_next/g, '$5');
  const client = await pool.connect();
  try {
    // The function's own settings (migrations/003), and the plan it keeps.
    await client.query('begin');
    await client.query('set local enable_sort = off');
    await client.query('set local enable_bitmapscan = off');
    await client.query("set local plan_cache_mode = 'force_generic_plan'");
    await client.query(
      `prepare candidate (boolean, text[], text[], pg_snapshot, bigint) as ${query}`,
    );
    const plan = await client.query(
      "explain (format json) execute candidate (false, '{bulk}', null, pg_current_snapshot(), 0)",
    );
    const text = JSON.stringify(plan.rows[0]['QUERY PLAN']);
    await client.query('rollback');
    assert.match(text, /"Index Name":"tasks_claimable"/);
    assert.match(text, /"Index Cond":"\((t\.)?trusted = \$1\)"/);
    assert.doesNotMatch(text, /"Node Type":"Sort"/);
  } finally {
    client.release();
  }
  const worker = await untrustedWorker(['bulk']);
  assert.equal((await claimTask(pool, worker, ['bulk']))?.name, 'bulk-fork');
});

test('migration 003 copies the trust of existing jobs onto their tasks', async () => {
  const old = await testDatabase(`${import.meta.filename}-003`, { migrate: false });
  const migrations = loadMigrations();
  await migrate(old.pool, migrations.slice(0, 2));
  await old.pool.query(`insert into projects (id, name, forge, repo, repo_url, webhook_secret_enc)
    values ('p', 'p', 'github', 'acme/p', 'https://forge.test/acme/p', 'sealed')`);
  for (const [number, trusted] of [
    [1, true],
    [2, false],
  ] as const) {
    await old.pool.query(
      `with j as (
         insert into jobs (project_id, number, state, trigger, ref, sha, trusted, started_at)
         values ('p', $1, 'running', 'push', 'refs/heads/main', $2, $3, now()) returning id, created_at)
       insert into tasks (job_id, job_created_at, position, name, base_name, script, state,
                          max_attempts, timeout_s, queued_at)
       select id, created_at, 0, 'a', 'a', '{true}', 'queued', 1, 60, now() from j`,
      [number, sha(number), trusted],
    );
  }
  await migrate(old.pool, migrations);
  const { rows } = await old.pool.query(
    'select j.number, t.trusted from tasks t join jobs j on j.id = t.job_id order by j.number',
  );
  assert.deepEqual(rows, [
    { number: 1, trusted: true },
    { number: 2, trusted: false },
  ]);
  const { rows: columns } = await old.pool.query(
    `select column_default from information_schema.columns
      where table_name = 'tasks' and column_name = 'trusted'`,
  );
  assert.deepEqual(columns, [{ column_default: null }], 'new tasks must say their pool');
});
