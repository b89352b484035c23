// org: concurrency groups stay within the projects that joined them (issue
// #46): a trusted job of project A naming org:prod-deploy with
// cancel_running stopped project B's running deploy, replace_pending
// cancelled B's queued one, and B's waiting reason named A's job numbers.
// Now a mode acts across projects only when both list the group in
// org_groups, and a waiting reason counts other projects' holders without
// naming them.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { CompiledConcurrency } from '../../lib/pipeline/index.ts';
import { claimTask, createJob, getJobView, startJob } from '../../lib/scheduler/index.ts';
import { testDatabase } from '../helpers/db.ts';
import { makeProject, makeWorker, startedJob } from '../helpers/fixtures.ts';
import { laneSpec, newLane } from '../helpers/race.ts';

const { pool } = await testDatabase(import.meta.filename);

const group = (name: string, mode: CompiledConcurrency['mode']): CompiledConcurrency => ({
  group: name,
  limit: 1,
  mode,
});

async function inGroups(project: string, ...names: string[]) {
  await pool.query('update projects set org_groups = $2 where id = $1', [project, names]);
}

const taskOf = async (jobId: string) => (await getJobView(pool, jobId)).tasks[0];

for (const mode of ['cancel_running', 'replace_pending'] as const) {
  test(`${mode} in an org: group leaves another project's tasks alone unless both projects are in it`, async () => {
    const a = await makeProject(pool);
    const b = await makeProject(pool);
    const name = `prod-deploy-${mode}`;
    await inGroups(a, name);
    const worker = await makeWorker(pool);
    const lane = newLane();
    const g = group(`org:${name}`, mode);
    // B's deploys queue (B joined the group before A listed it, or left it since).
    const queue = group(`org:${name}`, 'queue');
    const running = await startedJob(pool, b, [laneSpec(lane, 'deploy', { concurrency: queue })]);
    assert.equal((await claimTask(pool, worker, [lane]))?.job_id, running.id);
    const queued = await startedJob(pool, b, [laneSpec(lane, 'deploy', { concurrency: queue })]);
    await startedJob(pool, a, [laneSpec(lane, 'deploy', { concurrency: g })]);
    const held = await pool.query<{ cancel_requested: boolean }>(
      'select cancel_requested from tasks where job_id = $1',
      [running.id],
    );
    assert.equal(held.rows[0]?.cancel_requested, false, "B's running deploy is not stopped");
    assert.equal((await taskOf(running.id))?.state, 'running');
    assert.equal((await taskOf(queued.id))?.state, 'queued', "B's queued deploy is not replaced");

    // Both in the group: the mode acts across them, as the group says.
    await inGroups(b, name);
    const newest = await startedJob(pool, a, [laneSpec(lane, 'deploy', { concurrency: g })]);
    assert.equal((await taskOf(queued.id))?.state, 'cancelled');
    assert.match(
      (await taskOf(queued.id))?.error ?? '',
      new RegExp(
        `^${mode === 'replace_pending' ? 'replaced' : 'cancelled'} by job #\\d+ in group org:${name}`,
      ),
    );
    const after = await pool.query<{ cancel_requested: boolean }>(
      'select cancel_requested from tasks where job_id = $1',
      [running.id],
    );
    assert.equal(after.rows[0]?.cancel_requested, mode === 'cancel_running');
    assert.equal((await taskOf(newest.id))?.state, 'queued');
  });
}

test("a pipeline's org: group with cancel_running does not cancel another project's running job unless both are in it", async () => {
  const a = await makeProject(pool, { cancelSuperseded: false });
  const b = await makeProject(pool, { cancelSuperseded: false });
  await inGroups(a, 'release');
  const worker = await makeWorker(pool);
  const lane = newLane();
  const jobOf = async (project: string) => {
    const { job } = await createJob(pool, {
      projectId: project,
      ref: 'refs/heads/main',
      sha: 'c'.repeat(40),
      trigger: 'push',
      trusted: true,
    });
    await startJob(pool, job.id, {
      name: null,
      tasks: [laneSpec(lane, 'a')],
      concurrency: group('org:release', 'cancel_running'),
    });
    return job;
  };
  const theirs = await jobOf(b);
  assert.equal((await claimTask(pool, worker, [lane]))?.job_id, theirs.id);
  await jobOf(a);
  assert.equal((await getJobView(pool, theirs.id)).job.state, 'running');
  await inGroups(b, 'release');
  await jobOf(a);
  const view = await getJobView(pool, theirs.id);
  assert.equal(view.job.state, 'cancelled');
  assert.match(view.job.error ?? '', /^cancelled by job #\d+ in group org:release/);
});

test("a task waiting for an org: group counts another project's holder without naming its job", async () => {
  const a = await makeProject(pool);
  const b = await makeProject(pool);
  await inGroups(a, 'shared-db');
  await inGroups(b, 'shared-db');
  const worker = await makeWorker(pool);
  const lane = newLane();
  const g = group('org:shared-db', 'queue');
  const mine = await startedJob(pool, b, [laneSpec(lane, 'deploy', { concurrency: g })]);
  assert.equal((await claimTask(pool, worker, [lane]))?.job_id, mine.id);
  await startedJob(pool, a, [laneSpec(lane, 'deploy', { concurrency: g })]);
  const waiting = await startedJob(pool, a, [laneSpec(lane, 'deploy', { concurrency: g })]);
  assert.equal(
    (await taskOf(waiting.id))?.queue_reason,
    'waiting for group org:shared-db, held by a job of another project, position 2',
  );
  const own = await startedJob(pool, b, [laneSpec(lane, 'deploy', { concurrency: g })]);
  const { rows } = await pool.query<{ number: number }>('select number from jobs where id = $1', [
    mine.id,
  ]);
  assert.equal(
    (await taskOf(own.id))?.queue_reason,
    `waiting for group org:shared-db, held by job #${rows[0]?.number}, position 3`,
  );
});
