// An untrusted job (a fork's pull request, its pipeline file the author's)
// that names the production group with cancel_running does not stop the
// trusted deploy running in it, nor, with org:, one of another project: its
// groups are its own (#30 review).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { claimTask } from '../../lib/scheduler/index.ts';
import { testDatabase } from '../helpers/db.ts';
import { makeProject, makeWorker, startedJob } from '../helpers/fixtures.ts';
import { laneSpec, newLane } from '../helpers/race.ts';

const db = await testDatabase(import.meta.filename, { poolMax: 4 });
const { pool } = db;

for (const org of [false, true]) {
  test(`an untrusted job's cancel_running does not stop a trusted deploy${org ? ' of another project (org:)' : ''}`, async () => {
    const project = await makeProject(pool);
    const attacker = org ? await makeProject(pool) : project;
    const worker = await makeWorker(pool);
    const lane = newLane();
    const group = org ? 'org:deploy' : 'deploy-main';
    const deploy = await startedJob(pool, project, [
      laneSpec(lane, 'deploy', { concurrency: { group, limit: 1, mode: 'queue' } }),
    ]);
    const held = await claimTask(pool, worker, [lane]);
    assert.equal(held?.job_id, deploy.id);
    await startedJob(
      pool,
      attacker,
      [laneSpec(lane, 'x', { concurrency: { group, limit: 1, mode: 'cancel_running' } })],
      { trusted: false },
    );
    const { rows } = await pool.query<{ cancel_requested: boolean }>(
      'select cancel_requested from tasks where id = $1',
      [held!.id],
    );
    assert.equal(rows[0]?.cancel_requested, false, 'the trusted deploy is not told to stop');
  });
}
