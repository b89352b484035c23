// Migration 019: the one-column CHECK constraints of `tasks` and
// `task_attempts` became domains (issue #36: every INSERT and UPDATE compiled
// all of a table's CHECK constraints again). What a row may hold must not
// change: each value a constraint refused is still refused, with the same
// SQLSTATE, and nothing of the refused statement is written; a database made
// before the migration keeps its rows and runs the task cycle on them.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  loadFunctionFiles,
  loadMigrations,
  migrate,
  type Pool,
  SQLSTATE,
  sqlState,
} from '../../lib/db/index.ts';
import { claimTask, completeTask } from '../../lib/scheduler/index.ts';
import { testDatabase } from '../helpers/db.ts';
import { makeProject, makeWorker, spec, startedJob, tasksOf } from '../helpers/fixtures.ts';

const db = await testDatabase(import.meta.filename);

/** A running task and its attempt: a job of one task, claimed. */
async function claimedTask(pool: Pool): Promise<{ id: string; attempt: number; lease: string }> {
  const project = await makeProject(pool);
  const worker = await makeWorker(pool, ['x']);
  await startedJob(pool, project, [spec('a', { labels: ['x'] })]);
  const task = await claimTask(pool, worker, ['x']);
  assert.ok(task, 'the task was claimed');
  return { id: task.id, attempt: task.attempt, lease: task.lease_id! };
}

const snapshot = async (pool: Pool, id: string) =>
  (
    await pool.query(
      `select to_jsonb(t) as task,
              (select jsonb_agg(to_jsonb(a) order by a.attempt) from task_attempts a where a.task_id = t.id) as attempts
         from tasks t where t.id = $1`,
      [id],
    )
  ).rows[0];

test('each value a task or attempt column refused before migration 019 is still refused, and nothing is written', async () => {
  const task = await claimedTask(db.pool);
  const before = await snapshot(db.pool, task.id);
  const refused: [string, string][] = [
    ['tasks', `state = 'exploded'`],
    ['tasks', `run_when = 'sometimes'`],
    ['tasks', `concurrency_mode = 'stampede'`],
    ['tasks', 'attempt = -1'],
    ['tasks', 'position = -1'],
    ['tasks', 'max_attempts = 0'],
    ['tasks', 'timeout_s = 0'],
    ['tasks', 'queue_timeout_s = 0'],
    ['tasks', 'concurrency_limit = 0'],
    // The two that relate columns stayed table constraints.
    ['tasks', 'attempt = max_attempts + 1'],
    ['tasks', 'lease_id = null'],
    ['task_attempts', `outcome = 'vanished'`],
    ['task_attempts', `claim_key = repeat('k', 201)`],
    ['task_attempts', 'attempt = 0'],
    ['task_attempts', 'log_size = -1'],
  ];
  for (const [table, set] of refused) {
    const key = table === 'tasks' ? 'id = $1' : 'task_id = $1';
    await assert.rejects(
      db.pool.query(`update ${table} set ${set} where ${key}`, [task.id]),
      (err) => sqlState(err) === SQLSTATE.checkViolation,
      `${table}: set ${set} is refused with check_violation`,
    );
  }
  await assert.rejects(
    db.pool.query(
      `insert into task_attempts (task_id, attempt, lease_id, worker_id, claim_key)
       values ($1, 2, gen_random_uuid(), gen_random_uuid(), repeat('k', 201))`,
      [task.id],
    ),
    (err) => sqlState(err) === SQLSTATE.checkViolation,
    'an attempt with an over-long claim key is not inserted',
  );
  assert.deepEqual(
    await snapshot(db.pool, task.id),
    before,
    'the refused statements wrote nothing',
  );

  // The limits themselves are allowed: the domains refuse no more than the constraints did.
  await db.pool.query(
    `update tasks set position = 0, timeout_s = 1, queue_timeout_s = 1, concurrency_limit = 1,
       concurrency_mode = 'cancel_running', run_when = 'always', max_attempts = attempt
     where id = $1`,
    [task.id],
  );
  await db.pool.query(
    `update task_attempts set claim_key = repeat('k', 200), log_size = 0 where task_id = $1`,
    [task.id],
  );
});

test('migration 019 keeps the tasks and attempts a database already holds, and the cycle goes on on them', async () => {
  // One connection: the claim after the migration runs on the connection that
  // prepared it before, whose plan of `(c.task).*` expects the old column types
  // (lib/db/statement.ts, isStalePlan: the connection is closed and the claim
  // runs again on a new one).
  const old = await testDatabase(`${import.meta.filename}-018`, { migrate: false, poolMax: 1 });
  const migrations = loadMigrations();
  const at = migrations.findIndex((m) => m.id === 19);
  assert.equal(migrations[at]?.name, 'check_domains');
  // The schema as it was before 019, with the function files of today (they
  // name no constraint and no domain, so they run on both).
  await migrate(old.pool, { migrations: migrations.slice(0, at), functions: loadFunctionFiles() });
  // Today's code makes the rows, and it names a column a later migration adds
  // (025: projects.github_app, read when a job records its status); the column
  // is lent for the setup and taken back before the migrations run on.
  await old.pool.query('alter table projects add column github_app boolean not null default false');
  const running = await claimedTask(old.pool);
  const project = await makeProject(old.pool);
  const queued = await startedJob(old.pool, project, [spec('q', { labels: ['later'] })]);
  await old.pool.query('alter table projects drop column github_app');
  const before = await snapshot(old.pool, running.id);

  await migrate(old.pool);

  assert.deepEqual(await snapshot(old.pool, running.id), before, 'the rows are unchanged');
  const { rows: types } = await old.pool.query(
    `select table_name, column_name, domain_name from information_schema.columns
      where table_name in ('tasks', 'task_attempts') and column_name in ('state', 'outcome')
      order by table_name`,
  );
  assert.deepEqual(types, [
    {
      table_name: 'task_attempts',
      column_name: 'outcome',
      domain_name: 'conductor_attempt_outcome',
    },
    { table_name: 'tasks', column_name: 'state', domain_name: 'conductor_task_state' },
  ]);
  // The running task completes, the queued one is claimed, on the migrated schema.
  const worker = (await old.pool.query('select worker_id from tasks where id = $1', [running.id]))
    .rows[0].worker_id;
  const done = await completeTask(old.pool, {
    workerId: worker,
    taskId: running.id,
    leaseId: running.lease,
    outcome: 'success',
  });
  assert.equal(done.state, 'success');
  const later = await claimTask(old.pool, await makeWorker(old.pool, ['later']), ['later']);
  assert.equal(later?.name, 'q');
  assert.equal((await tasksOf(old.pool, queued.id)).q?.state, 'running');
});
