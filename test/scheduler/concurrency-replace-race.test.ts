// A pipeline-level replace_pending racing the older job's first claim (#30
// review): the claim commits first, the older job holds the group, and
// replace_pending (which re-reads the job under its lock) leaves it running.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { applyJobGroupMode } from '../../lib/scheduler/concurrency.ts';
import { claimTask, createJob, startJob } from '../../lib/scheduler/index.ts';
import { testDatabase } from '../helpers/db.ts';
import { makeProject, makeWorker } from '../helpers/fixtures.ts';
import { holdRows, laneSpec, lockOrder, newLane, racePool } from '../helpers/race.ts';

const db = await testDatabase(import.meta.filename, { poolMax: 4 });
const { pool } = db;
const racing = { url: db.url, applicationName: 'review-30-replace' };

test('replace_pending never cancels a job that holds the group', async () => {
  const project = await makeProject(pool);
  const worker = await makeWorker(pool);
  const lane = newLane();
  const start = async () => {
    const { job } = await createJob(pool, {
      projectId: project,
      ref: `refs/heads/b-${randomBytes(3).toString('hex')}`,
      sha: randomBytes(20).toString('hex'),
      trigger: 'push',
      trusted: true,
    });
    await startJob(pool, job.id, {
      name: null,
      tasks: [{ ...laneSpec(lane, 'deploy'), position: 0 }],
      concurrency: { group: 'release', limit: 1, mode: 'queue' },
    });
    return job;
  };
  const older = await start();
  const newer = await start();
  // The newer job's post-commit mode, as startJob runs it, racing the older job's first claim.
  await pool.query(`update jobs set concurrency_mode = 'replace_pending' where id = $1`, [
    newer.id,
  ]);
  const racers = await racePool(racing, 2);
  try {
    const hold = await holdRows(pool, 'jobs', [older.id]);
    const [claim, apply] = await lockOrder(pool, racing)(
      hold,
      () => claimTask(racers, worker, [lane]),
      () => applyJobGroupMode(racers, newer.id),
    );
    assert.equal(claim.status, 'fulfilled');
    const claimed = claim.status === 'fulfilled' ? claim.value : null;
    assert.equal(claimed?.job_id, older.id, 'the older job took the group');
    const { rows } = await pool.query<{ state: string; group_held: boolean }>(
      'select state, group_held from jobs where id = $1',
      [older.id],
    );
    assert.deepEqual(
      { ...rows[0], cancelledBy: apply.status === 'fulfilled' ? apply.value : apply.reason },
      { state: 'running', group_held: true, cancelledBy: [] },
      'the holder runs on',
    );
  } finally {
    await racers.end();
  }
});
