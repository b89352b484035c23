// A group's limit is the smallest of its holders' and the candidate's (#30
// review): a job whose pipeline (another branch's, a pull request's) writes
// a higher limit for the same group does not run beside a limit-1 holder.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { claimTask, getJobView } from '../../lib/scheduler/index.ts';
import { testDatabase } from '../helpers/db.ts';
import { makeProject, makeWorker, startedJob } from '../helpers/fixtures.ts';
import { laneSpec, newLane } from '../helpers/race.ts';

const db = await testDatabase(import.meta.filename, { poolMax: 4 });
const { pool } = db;

test('a later job declaring limit 5 does not run beside the limit-1 holder of the group', async () => {
  const project = await makeProject(pool);
  const worker = await makeWorker(pool);
  const lane = newLane();
  await startedJob(pool, project, [
    laneSpec(lane, 'deploy', { concurrency: { group: 'prod', limit: 1, mode: 'queue' } }),
  ]);
  assert.ok(await claimTask(pool, worker, [lane]));
  const later = await startedJob(pool, project, [
    laneSpec(lane, 'deploy', { concurrency: { group: 'prod', limit: 5, mode: 'queue' } }),
  ]);
  assert.equal(
    await claimTask(pool, worker, [lane]),
    null,
    'the group runs one at a time as its holder says',
  );
  // The page says why, as the claim counts: the group is full at the holder's limit.
  const view = await getJobView(pool, later.id);
  assert.match(
    view.tasks[0]?.queue_reason ?? '',
    /^waiting for group prod, held by job #\d+, position 1$/,
  );
});
