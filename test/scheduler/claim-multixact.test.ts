// A queued task whose xmax is a multixact id just ahead of the xid counter
// (issue #47). Two transactions that locked a row at once leave a multixact
// id in its xmax, which is not an xid; the claim's walk
// (conductor_claim_fresh) read one within 65,536 of its snapshot's xmax as a
// concurrent claimer's xid, counted the row as touched and took a younger
// task first, by claims whose snapshots followed every locker, until the xid
// counter passed the id. Now a number the xid counter has not reached is no
// xid, and the row is taken in its turn.
//
// The multixact counter must stand just ahead of the xid counter, which no
// shared server's does (xids are used far more): the test runs a cluster of
// its own (the embedded one, also when DATABASE_URL names another server),
// and moves its multixact counter there by creating multixacts cheaply: k
// transactions that each lock, with KEY SHARE, the rows whose id has their
// bit set make about 2^k multixacts (one per set of lockers) for k xids.
import assert from 'node:assert/strict';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { after, test } from 'node:test';
import pg from 'pg';
import { createPool, migrate } from '../../lib/db/index.ts';
import { claimTask } from '../../lib/scheduler/index.ts';
import { startEmbeddedPostgres, tempDirForCluster } from '../../local/postgres.ts';
import { makeProject, makeWorker, startedJob, tasksOf } from '../helpers/fixtures.ts';
import { laneSpec, newLane } from '../helpers/race.ts';

const parent = await tempDirForCluster('conductor-multixact-');
after(() => rm(parent, { recursive: true, force: true }));
const server = await startEmbeddedPostgres({
  dataDir: join(parent, 'pg'),
  ephemeral: true,
  removeOnStop: true,
});
after(() => server.stop());
await server.createDatabase('conductor');
const url = server.url('conductor');
const pool = createPool({ url, max: 4 });
after(() => pool.end());
await migrate(pool);

/** The next xid and the next multixact id, as the server counts them now. */
async function counters(): Promise<{ xid: number; multi: number }> {
  const { rows } = await pool.query<{ xid: number; multi: number }>(
    `select pg_snapshot_xmax(pg_current_snapshot())::text::bigint as xid,
            mxid_age('1'::xid)::bigint + 1 as multi`,
  );
  return rows[0]!;
}

/** Opens `n` connections, each in a transaction, runs `fn`, then rolls them back and closes them. */
async function withTransactions(n: number, fn: (cs: pg.Client[]) => Promise<void>) {
  const cs = Array.from({ length: n }, () => new pg.Client({ connectionString: url }));
  await Promise.all(cs.map((c) => c.connect()));
  try {
    await Promise.all(cs.map((c) => c.query('begin')));
    await fn(cs);
  } finally {
    await Promise.all(cs.map((c) => c.query('rollback').finally(() => c.end())));
  }
}

/** Creates multixacts until the multixact counter is `ahead` past the xid counter. */
async function moveMultixactsAhead(ahead: number): Promise<void> {
  await pool.query('create table if not exists mx (id integer primary key)');
  for (;;) {
    const now = await counters();
    const needed = now.xid + ahead - now.multi;
    if (needed <= 0) return;
    const k = Math.max(2, Math.ceil(Math.log2(needed + 64)));
    await pool.query('truncate mx');
    await pool.query('insert into mx select generate_series(0, $1::int - 1)', [2 ** k]);
    await withTransactions(k, async (cs) => {
      // Locker j takes the rows whose bit j is set: each row's lockers so far
      // are a set of its own, so each step makes a multixact per set.
      for (const [j, c] of cs.entries()) {
        await c.query(
          `with l as (select id from mx where id & $1::int <> 0 for key share) select count(*) from l`,
          [2 ** j],
        );
      }
    });
  }
}

test('a task whose xmax is a multixact just ahead of the xid counter is claimed before a younger one', async () => {
  const project = await makeProject(pool);
  const worker = await makeWorker(pool);
  const lane = newLane();
  const old = await startedJob(pool, project, [laneSpec(lane, 'old')]);
  const young = await startedJob(pool, project, [laneSpec(lane, 'young')]);
  const oldTask = (await tasksOf(pool, old.id)).old!;

  await moveMultixactsAhead(100);
  // Two lockers at once leave a multixact in the old task's xmax; both end
  // before the claim's snapshot.
  await withTransactions(2, async (cs) => {
    for (const c of cs)
      await c.query('select 1 from tasks where id = $1 for key share', [oldTask.id]);
  });
  const { rows } = await pool.query<{ xmax: number; next: number }>(
    `select xmax::text::bigint as xmax, pg_snapshot_xmax(pg_current_snapshot())::text::bigint as next
       from tasks where id = $1`,
    [oldTask.id],
  );
  const { xmax, next } = rows[0]!;
  assert.ok(
    xmax > next && xmax < next + 65_536,
    `the xmax ${xmax} lies just ahead of the xid counter ${next}`,
  );

  const claimed = await claimTask(pool, worker, [lane]);
  assert.equal(claimed?.job_id, old.id, 'the old task first');
  assert.equal((await claimTask(pool, worker, [lane]))?.job_id, young.id);
});
