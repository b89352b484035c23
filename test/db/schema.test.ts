import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SQLSTATE, sqlState } from '../../lib/db/index.ts';
import {
  ATTEMPT_OUTCOMES,
  BOT_PULL_REQUEST_POLICIES,
  FORGES,
  FORK_PULL_REQUEST_POLICIES,
  JOB_STATES,
  JOB_TRIGGERS,
  LAUNCH_STATES,
  NOTIFICATION_EVENTS,
  NOTIFICATION_KINDS,
  NOTIFICATION_RESULTS,
  POOL_PROVIDERS,
  SCHEDULE_CATCH_UP,
  STATUS_RESULTS,
  STATUS_STATES,
  TASK_RUN_WHEN,
  TASK_STATES,
  VISIBILITIES,
} from '../../lib/states.ts';
import { testDatabase } from '../helpers/db.ts';

const db = await testDatabase(import.meta.filename);

/** The quoted values of a named CHECK constraint, read back from the catalog. */
async function checkValues(constraint: string): Promise<string[]> {
  const { rows } = await db.pool.query(
    'select pg_get_constraintdef(oid) as def from pg_constraint where conname = $1',
    [constraint],
  );
  assert.equal(rows.length, 1, `constraint ${constraint} exists`);
  return [...rows[0].def.matchAll(/'([^']*)'::text/g)].map((m) => m[1]);
}

const pairs: [string, readonly string[]][] = [
  ['jobs_state_check', JOB_STATES],
  ['jobs_trigger_check', JOB_TRIGGERS],
  ['tasks_state_check', TASK_STATES],
  ['projects_forge_check', FORGES],
  ['projects_fork_pull_requests_check', FORK_PULL_REQUEST_POLICIES],
  ['projects_bot_pull_requests_check', BOT_PULL_REQUEST_POLICIES],
  ['projects_visibility_check', VISIBILITIES],
  ['task_attempts_outcome_check', ATTEMPT_OUTCOMES],
  ['status_outbox_state_check', STATUS_STATES],
  ['status_outbox_result_check', STATUS_RESULTS],
  ['tasks_run_when_check', TASK_RUN_WHEN],
  ['schedules_catch_up_check', SCHEDULE_CATCH_UP],
  ['pools_provider_check', POOL_PROVIDERS],
  ['runner_launches_state_check', LAUNCH_STATES],
  ['notifications_kind_check', NOTIFICATION_KINDS],
  ['notifications_on_check', NOTIFICATION_EVENTS],
  ['notification_outbox_reason_check', NOTIFICATION_EVENTS],
  ['notification_outbox_result_check', NOTIFICATION_RESULTS],
];

for (const [constraint, values] of pairs) {
  test(`the ${constraint} constraint allows exactly the states TypeScript knows`, async () => {
    assert.deepEqual(await checkValues(constraint), [...values]);
  });
}

test('a state outside the constants is rejected by the database', async () => {
  await db.pool.query(`insert into projects (id, name, forge, repo, repo_url, webhook_secret_enc)
    values ('p', 'P', 'github', 'o/r', 'https://example.test/o/r.git', 'x')`);
  await assert.rejects(
    db.pool.query(`insert into jobs (project_id, number, state, trigger, ref, sha, trusted)
      values ('p', 1, 'exploded', 'push', 'refs/heads/main', repeat('a', 40), true)`),
    (err) => sqlState(err) === SQLSTATE.checkViolation,
  );
  await assert.rejects(
    db.pool.query(`insert into projects (id, name, forge, repo, repo_url, webhook_secret_enc)
      values ('q', 'Q', 'bitbucket', 'o/q', 'x', 'x')`),
    (err) => sqlState(err) === SQLSTATE.checkViolation,
  );
});

test('the hot paths have their indexes', async () => {
  const { rows } = await db.pool.query(
    "select indexname from pg_indexes where schemaname = 'public'",
  );
  const names = new Set(rows.map((r) => r.indexname));
  for (const index of [
    'tasks_claimable', // claiming queued tasks
    'tasks_leases', // expired leases
    'tasks_unfinished', // settle's EXISTS
    'jobs_running', // running jobs
    'jobs_project_id_number_key', // a project's jobs, newest first
    'jobs_project_id_delivery_id_key', // repeated deliveries
  ]) {
    assert.ok(names.has(index), `index ${index} exists`);
  }
});

test('a claim of the oldest queued task is planned on the claim index', async () => {
  await db.pool.query('set enable_seqscan = off');
  const { rows } = await db.pool.query(`explain (format json)
    select id from tasks where state = 'queued' and trusted
     order by job_created_at, position limit 1 for update skip locked`);
  await db.pool.query('reset enable_seqscan');
  assert.match(JSON.stringify(rows[0]['QUERY PLAN']), /tasks_claimable/);
});
