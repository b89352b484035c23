// A block whose deadline has passed, not yet ended by the sweep, cannot be
// unblocked (#30 review): the deadline decides, not who comes first.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConflictError } from '../../lib/errors.ts';
import { unblockTask } from '../../lib/scheduler/block.ts';
import { testDatabase } from '../helpers/db.ts';
import { makeProject, startedJob } from '../helpers/fixtures.ts';
import { laneSpec, newLane } from '../helpers/race.ts';

const db = await testDatabase(import.meta.filename, { poolMax: 4 });
const { pool } = db;

test('an unblock after the deadline is refused', async () => {
  const project = await makeProject(pool);
  const lane = newLane();
  const block = { prompt: 'Deploy?', fields: [], timeoutS: 60, onTimeout: 'fail' as const };
  const job = await startedJob(pool, project, [laneSpec(lane, 'approve', { script: [], block })]);
  await pool.query(
    `update tasks set block_deadline = now() - interval '1 hour' where job_id = $1 and state = 'blocked'`,
    [job.id],
  );
  await assert.rejects(unblockTask(pool, job.id, 'approve', {}, 'admin'), (err: Error) => {
    assert.ok(err instanceof ConflictError, `a 409, not ${err.name}`);
    assert.match(err.message, /approve.*timed out/);
    return true;
  });
  const { rows } = await pool.query<{ state: string; unblocked_by: string | null }>(
    `select state, unblocked_by from tasks where job_id = $1 and name = 'approve'`,
    [job.id],
  );
  assert.deepEqual(rows[0], { state: 'blocked', unblocked_by: null }, 'left for the sweep to end');
});
