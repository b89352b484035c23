// A group's mode acts on the older jobs' tasks that have not started, not
// only those queued (#30 review): in the usual deploy pipeline (build, then
// deploy in the group) the older job's deploy still waits on its build when
// the newer job starts; it is replaced, and the older commit is never
// deployed after the newer.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import {
  claimTask,
  completeTask,
  createJob,
  getJobView,
  startJob,
} from '../../lib/scheduler/index.ts';
import { testDatabase } from '../helpers/db.ts';
import { makeProject, makeWorker, startedJob } from '../helpers/fixtures.ts';
import { laneSpec, newLane } from '../helpers/race.ts';

const db = await testDatabase(import.meta.filename, { poolMax: 4 });
const { pool } = db;

for (const mode of ['replace_pending', 'cancel_running'] as const) {
  test(`${mode}: an older job's deploy still waiting on its build when a newer job starts is replaced`, async () => {
    const project = await makeProject(pool);
    const worker = await makeWorker(pool);
    const lane = newLane();
    const concurrency = { group: 'deploy-main', limit: 1, mode };
    const tasks = () => [
      laneSpec(lane, 'build'),
      laneSpec(lane, 'deploy', { needs: ['build'], concurrency }),
    ];
    const older = await startedJob(pool, project, tasks());
    const newer = await startedJob(pool, project, tasks());
    // Both builds run and pass, the older one last.
    const b1 = await claimTask(pool, worker, [lane]);
    const b2 = await claimTask(pool, worker, [lane]);
    assert.deepEqual([b1?.name, b2?.name], ['build', 'build']);
    const ran: string[] = [];
    // The newer build passes first and its deploy starts; then the older build passes.
    await completeTask(pool, {
      workerId: worker,
      taskId: b2!.id,
      leaseId: b2!.lease_id!,
      outcome: 'success',
    });
    const first = await claimTask(pool, worker, [lane]);
    assert.equal(first?.job_id, newer.id);
    ran.push('newer');
    await completeTask(pool, {
      workerId: worker,
      taskId: b1!.id,
      leaseId: b1!.lease_id!,
      outcome: 'success',
    });
    await completeTask(pool, {
      workerId: worker,
      taskId: first!.id,
      leaseId: first!.lease_id!,
      outcome: 'success',
    });
    for (;;) {
      const d = await claimTask(pool, worker, [lane]);
      if (!d) break;
      ran.push(d.job_id === older.id ? 'older' : 'newer');
      await completeTask(pool, {
        workerId: worker,
        taskId: d.id,
        leaseId: d.lease_id!,
        outcome: 'success',
      });
    }
    const oldDeploy = (await getJobView(pool, older.id)).tasks.find((t) => t.name === 'deploy');
    assert.deepEqual(
      ran,
      ['newer'],
      `the older commit is never deployed after the newer (${mode}); the older's deploy ended ${oldDeploy?.state}`,
    );
  });
}

for (const mode of ['replace_pending', 'cancel_running'] as const) {
  test(`${mode}: an older job started after a newer one does not deploy after it`, async () => {
    const project = await makeProject(pool);
    const worker = await makeWorker(pool);
    const lane = newLane();
    const concurrency = { group: 'deploy-main', limit: 1, mode };
    const mk = () =>
      createJob(pool, {
        projectId: project,
        // Branches of their own: cancel_superseded leaves them to the group.
        ref: `refs/heads/b-${randomBytes(3).toString('hex')}`,
        sha: randomBytes(20).toString('hex'),
        trigger: 'push',
        trusted: true,
      });
    const older = (await mk()).job; // created first
    const newer = (await mk()).job;
    const tasks = [{ ...laneSpec(lane, 'deploy', { concurrency }), position: 0 }];
    await startJob(pool, newer.id, { name: null, tasks }); // compiled first
    await startJob(pool, older.id, { name: null, tasks });
    const got = await claimTask(pool, worker, [lane]);
    assert.equal(got?.job_id, newer.id, 'the newer job deploys');
    assert.equal(await claimTask(pool, worker, [lane]), null, 'the older job never deploys');
    const view = await getJobView(pool, older.id);
    const deploy = view.tasks.find((t) => t.name === 'deploy');
    assert.equal(deploy?.state, 'cancelled');
    const verb = mode === 'replace_pending' ? 'replaced' : 'cancelled';
    assert.equal(
      (deploy as { error?: string | null } | undefined)?.error,
      `${verb} by job #${newer.number} in group deploy-main (${mode})`,
    );
  });
}
