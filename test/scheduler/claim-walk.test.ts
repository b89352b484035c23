// The claim's walk (migrations/functions/conductor_claim.sql, issue #36)
// reads candidates through a cursor and locks the one it picks by id in a
// statement of its own. A claim is stalled inside that walk, on purpose, while
// another claimer takes the same task and commits; then it goes on. At
// REPEATABLE READ (the pool's setting) the lock raises 40001 and the retry
// claims anew. At READ COMMITTED (what a connection URL's `options` can
// leave a session at) the lock reads the newest row, and before the review's
// fix it took the running task a second time. Each order is forced: the
// stall is an advisory lock the test holds, taken by a shadow function or
// operator in a schema `stall` ahead of public on the stalled connection's
// search_path (as test/scheduler/fastpath-races.test.ts stalls a claim).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';
import pg from 'pg';
import { claimTask } from '../../lib/scheduler/index.ts';
import { testDatabase } from '../helpers/db.ts';
import { makeWorker, startedJob } from '../helpers/fixtures.ts';
import { forgeProject, laneSpec, newLane, until } from '../helpers/race.ts';

const db = await testDatabase(import.meta.filename, { poolMax: 6 });
const { pool } = db;
const KEY = 4_242_001;

// `fresh`: after the row's xmax was read (the untouched path); `quals`: while
// the row's conditions are evaluated (the labels' <@).
await pool.query(`
  create schema stall;
  create function stall.conductor_claim_fresh(p_xmax xid, p_snap pg_snapshot, p_next bigint)
  returns boolean language plpgsql volatile as $$
  begin
    perform pg_advisory_xact_lock_shared(${KEY});
    return public.conductor_claim_fresh(p_xmax, p_snap, p_next);
  end $$;
  create function stall.contained(a text[], b text[]) returns boolean
  language plpgsql volatile as $$
  begin
    perform pg_advisory_xact_lock_shared(${KEY + 1});
    return a operator(pg_catalog.<@) b;
  end $$;
  create operator stall.<@ (leftarg = text[], rightarg = text[], function = stall.contained);
`);

async function connection(searchPath?: string): Promise<pg.Client> {
  const c = new pg.Client({
    connectionString: db.url,
    ...(searchPath ? { options: `-c search_path=${searchPath}` } : {}),
  });
  await c.connect();
  return c;
}

type Where = 'fresh' | 'quals';
type Isolation = 'read committed' | 'repeatable read';

/**
 * A claim for `worker` at `isolation`, stalled at `where` while `during`
 * runs and commits; answers the task name it got, null, or `error <code>`.
 */
async function stalledClaim(
  isolation: Isolation,
  where: Where,
  worker: string,
  lane: string,
  during: () => Promise<void>,
): Promise<string | null> {
  const key = where === 'fresh' ? KEY : KEY + 1;
  const blocker = await connection();
  const c = await connection('stall,public');
  try {
    await blocker.query('select pg_advisory_lock($1)', [key]);
    await c.query(`begin isolation level ${isolation}`);
    const answer = c
      .query<{ name: string }>(
        'select (x.task).name from conductor_claim($1, $2::text[], 60, $3, null) x',
        [worker, [lane], randomUUID()],
      )
      .then(
        (r) => r.rows[0]?.name ?? null,
        (e: { code?: string }) => `error ${e.code}`,
      );
    const pid = (c as unknown as { processID: number }).processID;
    await until('the claim waits inside its walk', async () => {
      const { rows } = await pool.query<{ w: boolean }>(
        `select wait_event_type = 'Lock' as w from pg_stat_activity where pid = $1`,
        [pid],
      );
      return rows[0]?.w === true;
    });
    await during();
    await blocker.query('select pg_advisory_unlock($1)', [key]);
    const got = await answer;
    await c.query(got?.startsWith('error') ? 'rollback' : 'commit');
    return got;
  } finally {
    await blocker.end();
    await c.end();
  }
}

for (const where of ['fresh', 'quals'] as const) {
  for (const [isolation, expected] of [
    ['repeatable read', 'error 40001'],
    ['read committed', null],
  ] as const) {
    test(`stalled at ${where}, at ${isolation}: a task another claimer took meanwhile is not taken twice (${expected ?? 'nothing claimed'})`, async () => {
      const lane = newLane();
      const project = await forgeProject(pool);
      const worker = await makeWorker(pool, [lane]);
      const other = await makeWorker(pool, [lane]);
      const job = await startedJob(pool, project, [laneSpec(lane, 'only')]);
      const got = await stalledClaim(isolation, where, worker, lane, async () => {
        assert.equal((await claimTask(pool, other, [lane], { retries: 0 }))?.name, 'only');
      });
      assert.equal(got, expected);
      const { rows } = await pool.query<{ attempt: number; attempts: number; worker: string }>(
        `select t.attempt, t.worker_id as worker,
                (select count(*)::int from task_attempts a where a.task_id = t.id) as attempts
           from tasks t where t.job_id = $1`,
        [job.id],
      );
      assert.deepEqual(rows, [{ attempt: 1, attempts: 1, worker: other }]);
    });
  }
}
