// A pipeline-level group (limit 2) with nobody holding a slot (#30 review):
// an older job waiting at an approval (a block step first: it has nothing to
// claim) does not head the group, and a newer job of the group starts.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { claimTask, createJob, startJob } from '../../lib/scheduler/index.ts';
import { testDatabase } from '../helpers/db.ts';
import { makeProject, makeWorker } from '../helpers/fixtures.ts';
import { laneSpec, newLane } from '../helpers/race.ts';

const db = await testDatabase(import.meta.filename, { poolMax: 4 });
const { pool } = db;

test('limit 2, no slot held: a job waiting for an approval does not stop a newer job of the group', async () => {
  const project = await makeProject(pool);
  const worker = await makeWorker(pool);
  const lane = newLane();
  const concurrency = { group: 'deploy', limit: 2, mode: 'queue' as const };
  const start = async (tasks: ReturnType<typeof laneSpec>[]) => {
    const { job } = await createJob(pool, {
      projectId: project,
      ref: `refs/heads/b-${randomBytes(3).toString('hex')}`,
      sha: randomBytes(20).toString('hex'),
      trigger: 'push',
      trusted: true,
    });
    await startJob(pool, job.id, {
      name: null,
      tasks: tasks.map((t, i) => ({ ...t, position: i })),
      concurrency,
    });
    return job;
  };
  const block = { prompt: 'Deploy?', fields: [], timeoutS: 259200, onTimeout: 'fail' as const };
  await start([
    laneSpec(lane, 'approve', { script: [], block }),
    laneSpec(lane, 'deploy', { needs: ['approve'] }),
  ]);
  const newer = await start([laneSpec(lane, 'build')]);
  const got = await claimTask(pool, worker, [lane]);
  assert.equal(got?.job_id, newer.id, 'the newer job starts in a free slot');
});
