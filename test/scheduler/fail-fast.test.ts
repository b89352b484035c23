// fail_fast on a matrix task (issue #34): a failed expansion cancels its
// siblings still waiting or queued, and flags those running, in the follow-up
// after its failure commits; the job settles failed once, when the last
// flagged sibling has stopped. The races are forced as in forced-races.test.ts:
// a connection of the test holds the contested row, the first contender is
// seen blocked on it, then the second, then the row is let go, and PostgreSQL
// grants it in the order they queued.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Pool } from '../../lib/db/index.ts';
import {
  type ClaimedTask,
  type CompletionResult,
  claimTask,
  completeTask,
  sweep,
} from '../../lib/scheduler/index.ts';
import type { TaskSpec } from '../../lib/scheduler/types.ts';
import { testDatabase } from '../helpers/db.ts';
import { makeWorker, startedJob } from '../helpers/fixtures.ts';
import {
  assertTransitions,
  finalStatuses,
  forgeProject,
  holdRows,
  installAudit,
  laneSpec,
  lockOrder,
  newLane,
  settledValue,
  withRacers,
} from '../helpers/race.ts';

const db = await testDatabase(import.meta.filename, { poolMax: 6 });
const { pool } = db;
const racing = { url: db.url, applicationName: 'conductor-fail-fast' };
await installAudit(pool);

function report(
  racers: Pool,
  task: ClaimedTask,
  outcome: 'success' | 'failed',
): Promise<CompletionResult> {
  return completeTask(racers, {
    workerId: task.worker_id!,
    taskId: task.id,
    leaseId: task.lease_id!,
    outcome,
    exitCode: outcome === 'success' ? 0 : 1,
  });
}

/** The expansions `m (n: 1)` … of matrix task `m`, and (`after`) a task that needs them all. */
function matrixSpecs(
  lane: string,
  width: number,
  over: Partial<TaskSpec>,
  after: boolean,
): TaskSpec[] {
  const names = Array.from({ length: width }, (_, i) => `m (n: ${i + 1})`);
  const expansions = names.map((name, i) =>
    laneSpec(lane, name, { baseName: 'm', matrix: { n: String(i + 1) }, ...over }),
  );
  return after ? [...expansions, laneSpec(lane, 'after', { needs: names })] : expansions;
}

/**
 * A running job of `width` fail_fast expansions (unless `over` says otherwise), the first
 * `claimed` of them claimed, the rest queued.
 */
async function matrixJob(
  width: number,
  claimed: number,
  over: Partial<TaskSpec> = {},
  after = true,
) {
  const project = await forgeProject(pool);
  const worker = await makeWorker(pool);
  const lane = newLane();
  const job = await startedJob(
    pool,
    project,
    matrixSpecs(lane, width, { failFast: true, ...over }, after),
  );
  // Claims take the oldest job's tasks in position order: the first `claimed` expansions.
  const tasks: ClaimedTask[] = [];
  for (let i = 0; i < claimed; i++) {
    const task = await claimTask(pool, worker, [lane]);
    assert.ok(task, `expansion ${i + 1} is claimable`);
    tasks.push(task);
  }
  const byName = (name: string) => tasks.find((t) => t.name === name)!;
  return { jobId: job.id, byName };
}

interface TaskView {
  state: string;
  cancel_requested: boolean;
  error: string | null;
}

async function tasksOf(jobId: string): Promise<Record<string, TaskView>> {
  const { rows } = await pool.query<TaskView & { name: string }>(
    'select name, state, cancel_requested, error from tasks where job_id = $1',
    [jobId],
  );
  return Object.fromEntries(rows.map(({ name, ...rest }) => [name, rest]));
}

async function jobState(jobId: string): Promise<string> {
  const { rows } = await pool.query('select state from jobs where id = $1', [jobId]);
  return rows[0].state;
}

async function statusesOf(jobId: string): Promise<string[]> {
  return (await finalStatuses(pool, [jobId])).get(jobId)!.map((s) => s.state);
}

/** How many times each task of the job was cancelled or flagged, from the audit. */
async function stops(jobId: string): Promise<Record<string, number>> {
  const { rows } = await pool.query<{ name: string; n: number }>(
    `select t.name, count(*)::int as n
       from audit a join tasks t on t.id = a.id
      where a.job_id = $1 and a.kind = 'task' and a.new_state = 'cancelled'
      group by t.name`,
    [jobId],
  );
  return Object.fromEntries(rows.map((r) => [r.name, r.n]));
}

const inOrder = lockOrder(pool, racing);
const value = settledValue;

test('a failed fail_fast expansion cancels its queued siblings and flags the running one; the job fails once they stop', async () => {
  const { jobId, byName } = await matrixJob(4, 2);
  const failed = await report(pool, byName('m (n: 1)'), 'failed');
  assert.deepEqual([failed.state, failed.job_state], ['failed', null]);
  const tasks = await tasksOf(jobId);
  assert.deepEqual(tasks['m (n: 2)'], { state: 'running', cancel_requested: true, error: null });
  for (const name of ['m (n: 3)', 'm (n: 4)']) {
    assert.deepEqual(tasks[name], {
      state: 'cancelled',
      cancel_requested: false,
      error: 'cancelled: m (n: 1) failed (fail_fast)',
    });
  }
  assert.equal(tasks.after?.state, 'skipped');
  assert.equal(await jobState(jobId), 'running', 'a flagged sibling is still running');

  // The runner hears the flag on its heartbeat and stops; whatever it reports, it was cancelled.
  const last = await report(pool, byName('m (n: 2)'), 'success');
  assert.deepEqual([last.state, last.job_state], ['cancelled', 'failed']);
  assert.deepEqual(await statusesOf(jobId), ['failure']);
  await assertTransitions(pool, [jobId]);
});

test('without fail_fast, a failed expansion leaves its siblings running', async () => {
  const { jobId, byName } = await matrixJob(3, 3, { failFast: false });
  await report(pool, byName('m (n: 1)'), 'failed');
  const tasks = await tasksOf(jobId);
  assert.deepEqual(
    [tasks['m (n: 2)']?.cancel_requested, tasks['m (n: 3)']?.cancel_requested],
    [false, false],
  );
  await report(pool, byName('m (n: 2)'), 'success');
  const last = await report(pool, byName('m (n: 3)'), 'success');
  assert.deepEqual([last.state, last.job_state], ['success', 'failed']);
  await assertTransitions(pool, [jobId]);
});

test('an expansion allowed to fail cancels nothing when it fails', async () => {
  const { jobId, byName } = await matrixJob(2, 2, { allowFailure: true });
  await report(pool, byName('m (n: 1)'), 'failed');
  assert.equal((await tasksOf(jobId))['m (n: 2)']?.cancel_requested, false);
  await report(pool, byName('m (n: 2)'), 'success');
  assert.equal((await tasksOf(jobId)).after?.state, 'queued', 'what needs the matrix runs');
});

test('an expansion the sweep fails for its timeout cancels its siblings too', async () => {
  const { jobId, byName } = await matrixJob(3, 2);
  await pool.query(
    `update task_attempts set started_at = now() - interval '2 hours' where task_id = $1`,
    [byName('m (n: 1)').id],
  );
  const summary = await sweep(pool, { lockTimeoutMs: 30_000 });
  assert.equal(summary.tasks_timed_out, 1);
  const tasks = await tasksOf(jobId);
  assert.equal(tasks['m (n: 1)']?.state, 'failed');
  assert.equal(tasks['m (n: 2)']?.cancel_requested, true);
  assert.deepEqual(
    [tasks['m (n: 3)']?.state, tasks['m (n: 3)']?.error],
    ['cancelled', 'cancelled: m (n: 1) failed (fail_fast)'],
  );
  const last = await report(pool, byName('m (n: 2)'), 'failed');
  assert.deepEqual([last.state, last.job_state], ['cancelled', 'failed']);
  await assertTransitions(pool, [jobId]);
});

// Two expansions fail at once: both outcomes commit, and both follow-ups find
// siblings to stop. The job row decides who stops them: each order forced.
for (const first of ['m (n: 1)', 'm (n: 2)']) {
  const second = first === 'm (n: 1)' ? 'm (n: 2)' : 'm (n: 1)';
  test(`two expansions fail at once, ${first}'s follow-up first: it stops the siblings, the other finds nothing, the job settles once`, async () => {
    const { jobId, byName } = await matrixJob(4, 3);
    const [a, b] = await withRacers(racing, 2, async (racers) =>
      inOrder(
        // Each follow-up takes the job's row before it stops anything.
        await holdRows(pool, 'jobs', [jobId]),
        () => report(racers, byName(first), 'failed'),
        () => report(racers, byName(second), 'failed'),
      ),
    );
    for (const result of [value(a, first), value(b, second)]) {
      assert.deepEqual([result.state, result.job_state], ['failed', null]);
    }
    const tasks = await tasksOf(jobId);
    assert.deepEqual(
      [tasks[first]?.state, tasks[second]?.state, tasks[second]?.cancel_requested],
      ['failed', 'failed', false],
      'both failures stand',
    );
    assert.deepEqual(tasks['m (n: 3)'], { state: 'running', cancel_requested: true, error: null });
    assert.deepEqual(tasks['m (n: 4)'], {
      state: 'cancelled',
      cancel_requested: false,
      error: `cancelled: ${first} failed (fail_fast)`,
    });
    assert.deepEqual(await stops(jobId), { 'm (n: 4)': 1 }, 'the queued sibling is cancelled once');

    const last = await report(pool, byName('m (n: 3)'), 'success');
    assert.deepEqual([last.state, last.job_state], ['cancelled', 'failed']);
    assert.deepEqual(await statusesOf(jobId), ['failure']);
    await assertTransitions(pool, [jobId]);
  });
}

// One expansion's follow-up stops a sibling whose own failure is being
// recorded at that moment. The sibling's row decides: each order forced. No
// task needs the matrix here: a failure that skips a dependent the other
// failure skipped already conflicts on it and retries, and the retry would
// meet the flag, which is the other order.
test("a sibling's failure recorded before the fail_fast reaches it stands as failed", async () => {
  const { jobId, byName } = await matrixJob(3, 3, {}, false);
  const x = byName('m (n: 1)');
  const y = byName('m (n: 2)');
  const [yDone, xDone] = await withRacers(racing, 2, async (racers) =>
    inOrder(
      await holdRows(pool, 'tasks', [y.id]),
      () => report(racers, y, 'failed'),
      // x's outcome commits at once; its follow-up then waits for y's row.
      () => report(racers, x, 'failed'),
    ),
  );
  assert.equal(value(yDone, 'y').state, 'failed');
  assert.equal(value(xDone, 'x').state, 'failed');
  const tasks = await tasksOf(jobId);
  assert.deepEqual(
    [tasks['m (n: 1)']?.state, tasks['m (n: 2)']?.state, tasks['m (n: 2)']?.cancel_requested],
    ['failed', 'failed', false],
  );
  assert.equal(tasks['m (n: 3)']?.cancel_requested, true);
  const last = await report(pool, byName('m (n: 3)'), 'success');
  assert.deepEqual([last.state, last.job_state], ['cancelled', 'failed']);
  assert.deepEqual(await statusesOf(jobId), ['failure']);
  await assertTransitions(pool, [jobId]);
});

test('a fail_fast that flags a sibling before its failure is recorded wins: the sibling is cancelled', async () => {
  const { jobId, byName } = await matrixJob(3, 3, {}, false);
  const x = byName('m (n: 1)');
  const y = byName('m (n: 2)');
  const [xDone, yDone] = await withRacers(racing, 2, async (racers) =>
    inOrder(
      await holdRows(pool, 'tasks', [y.id]),
      // x's outcome commits; its follow-up blocks on y's row, ahead of y's own completion.
      () => report(racers, x, 'failed'),
      () => report(racers, y, 'failed'),
    ),
  );
  assert.deepEqual(
    [value(xDone, 'x').state, value(yDone, 'y').state],
    ['failed', 'cancelled'],
    "y's completion saw the flag when its retry got the row",
  );
  const { rows } = await pool.query<{ reported_outcome: string }>(
    'select reported_outcome from task_attempts where task_id = $1',
    [y.id],
  );
  assert.deepEqual(
    rows.map((r) => r.reported_outcome),
    ['failed'],
    'what the runner said is kept',
  );
  const last = await report(pool, byName('m (n: 3)'), 'success');
  assert.deepEqual([last.state, last.job_state], ['cancelled', 'failed']);
  assert.deepEqual(await statusesOf(jobId), ['failure']);
  await assertTransitions(pool, [jobId]);
});

test('a failed-only rerun keeps fail_fast on the expansions it runs again', async () => {
  const { jobId, byName } = await matrixJob(2, 2);
  await report(pool, byName('m (n: 1)'), 'failed');
  await report(pool, byName('m (n: 2)'), 'success');
  assert.equal(await jobState(jobId), 'failed');
  const { rerunJob } = await import('../../lib/scheduler/rerun.ts');
  const rerun = await rerunJob(pool, jobId, true);
  const { rows } = await pool.query<{ name: string; fail_fast: boolean }>(
    `select name, fail_fast from tasks where job_id = $1 and name like 'm (%' order by name`,
    [rerun.job.id],
  );
  assert.deepEqual(
    rows.map((r) => [r.name, r.fail_fast]),
    [
      ['m (n: 1)', true],
      ['m (n: 2)', true],
    ],
  );
});
