// Concurrency groups (issue #30), on PostgreSQL: the claim statement takes a
// task of a group only when it heads the group's queue and the group has a
// free slot, so 16 claimers racing never run more of a group than its limit,
// and they start its tasks first in, first out; an audit table (a trigger on
// tasks) counts the holders in the order the claims wrote. Each mode, an
// org: group across two projects, a lost holder's slot freed by the takeover,
// and a queue timeout that does not run while a task waits for its group.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { CompiledConcurrency } from '../../lib/pipeline/index.ts';
import {
  claimTask,
  completeTask,
  createJob,
  getJobView,
  startJob,
  sweep,
} from '../../lib/scheduler/index.ts';
import type { TaskSpec } from '../../lib/scheduler/types.ts';
import { testDatabase } from '../helpers/db.ts';
import { makeProject, makeWorker, startedJob } from '../helpers/fixtures.ts';
import { laneSpec, newLane, racePool, sleep } from '../helpers/race.ts';

const db = await testDatabase(import.meta.filename, { poolMax: 6 });
const { pool } = db;
const racing = { url: db.url, applicationName: 'conductor-concurrency' };

// +1 when a task of a group starts running, -1 when it stops: summed in the
// order the claims and outcomes wrote them, the group's holders at each step.
await pool.query(`
  create table group_audit (
    seq bigserial primary key,
    key text not null,
    job_id uuid not null,
    delta int not null
  );
  create function group_audit() returns trigger language plpgsql as $$
  begin
    if new.concurrency_key is not null and (old.state = 'running') <> (new.state = 'running') then
      insert into group_audit (key, job_id, delta)
      values (new.concurrency_key, new.job_id, case when new.state = 'running' then 1 else -1 end);
    end if;
    return null;
  end $$;
  create trigger group_audit after update on tasks
    for each row execute function group_audit();
`);

const group = (name: string, over: Partial<CompiledConcurrency> = {}): CompiledConcurrency => ({
  group: name,
  limit: 1,
  mode: 'queue',
  ...over,
});

/** `n` jobs of `project`, one after another, each with one task of `concurrency` in `lane`. */
async function jobsInGroup(
  project: string,
  lane: string,
  n: number,
  concurrency: CompiledConcurrency,
  over: Partial<TaskSpec> = {},
) {
  const jobs = [];
  for (let i = 0; i < n; i++) {
    jobs.push(
      await startedJob(pool, project, [laneSpec(lane, 'deploy', { concurrency, ...over })]),
    );
  }
  return jobs;
}

async function audit(key: string): Promise<Array<{ job_id: string; delta: number }>> {
  const { rows } = await pool.query<{ job_id: string; delta: number }>(
    'select job_id, delta from group_audit where key = $1 order by seq',
    [key],
  );
  return rows;
}

function maxHolders(rows: Array<{ delta: number }>): number {
  let now = 0;
  let most = 0;
  for (const row of rows) {
    now += row.delta;
    most = Math.max(most, now);
  }
  return most;
}

for (const limit of [1, 2]) {
  test(`16 racing claimers run a group of limit ${limit} first in, first out, never more than ${limit} at once`, async () => {
    const project = await makeProject(pool);
    const worker = await makeWorker(pool);
    const lane = newLane();
    const jobs = await jobsInGroup(project, lane, 12, group(`deploy-${limit}`, { limit }));
    const racers = await racePool(racing, 16);
    let done = 0;
    try {
      await Promise.all(
        Array.from({ length: 16 }, async () => {
          while (done < jobs.length) {
            const task = await claimTask(racers, worker, [lane]);
            if (!task) {
              await sleep(2);
              continue;
            }
            // Held a while, so that a second holder would overlap it.
            await sleep(25);
            await completeTask(racers, {
              workerId: worker,
              taskId: task.id,
              leaseId: task.lease_id!,
              outcome: 'success',
            });
            done++;
          }
        }),
      );
    } finally {
      await racers.end();
    }
    const rows = await audit(`${project}/deploy-${limit}`);
    assert.equal(rows.length, 24, 'each task started and stopped once');
    assert.equal(maxHolders(rows), limit);
    const started = rows.filter((r) => r.delta === 1).map((r) => r.job_id);
    assert.deepEqual(
      started,
      jobs.map((j) => j.id),
      'started in job number order',
    );
  });
}

test('a task waiting for its group says which, who holds it and its position; its queue timeout does not run', async () => {
  const project = await makeProject(pool);
  const worker = await makeWorker(pool);
  const lane = newLane();
  const [first, second, third] = await jobsInGroup(
    project,
    lane,
    3,
    group('Deploy-Main'.toLowerCase()),
    {
      queueTimeoutS: 1,
    },
  );
  const holder = await claimTask(pool, worker, [lane]);
  assert.equal(holder?.job_id, first!.id);
  assert.equal(await claimTask(pool, worker, [lane]), null, 'the group is full');
  const { rows } = await pool.query<{ number: number }>('select number from jobs where id = $1', [
    first!.id,
  ]);
  const view = await getJobView(pool, third!.id);
  assert.equal(
    view.tasks[0]?.queue_reason,
    `waiting for group deploy-main, held by job #${rows[0]!.number}, position 2`,
  );
  await pool.query(
    `update tasks set queued_at = now() - interval '1 hour' where job_id = any($1)`,
    [[second!.id, third!.id]],
  );
  await sweep(pool);
  const still = await pool.query<{ state: string }>(
    'select state from tasks where job_id = any($1) order by job_created_at',
    [[second!.id, third!.id]],
  );
  assert.deepEqual(
    still.rows.map((r) => r.state),
    ['queued', 'queued'],
  );
});

test('replace_pending: a newer job cancels the older one still waiting in the group, saying so', async () => {
  const project = await makeProject(pool);
  const worker = await makeWorker(pool);
  const lane = newLane();
  const g = group('release', { mode: 'replace_pending' });
  const [running] = await jobsInGroup(project, lane, 1, g);
  const held = await claimTask(pool, worker, [lane]);
  assert.equal(held?.job_id, running!.id);
  const [waiting] = await jobsInGroup(project, lane, 1, g);
  assert.equal((await getJobView(pool, waiting!.id)).tasks[0]?.state, 'queued');
  const [newest] = await jobsInGroup(project, lane, 1, g);
  const old = await getJobView(pool, waiting!.id);
  assert.equal(old.tasks[0]?.state, 'cancelled');
  assert.match(
    old.tasks[0]?.error ?? '',
    /^replaced by job #\d+ in group release \(replace_pending\)$/,
  );
  assert.equal(old.job.state, 'failed');
  assert.equal(
    (await getJobView(pool, running!.id)).tasks[0]?.state,
    'running',
    'the holder runs on',
  );
  assert.equal((await getJobView(pool, newest!.id)).tasks[0]?.state, 'queued');
});

test('cancel_running: a newer job tells the running holder to stop, and takes the slot once it has', async () => {
  const project = await makeProject(pool);
  const worker = await makeWorker(pool);
  const lane = newLane();
  const g = group('prod', { mode: 'cancel_running' });
  const [older] = await jobsInGroup(project, lane, 1, g);
  const held = await claimTask(pool, worker, [lane]);
  assert.equal(held?.job_id, older!.id);
  const [newer] = await jobsInGroup(project, lane, 1, g);
  const flagged = await pool.query<{ cancel_requested: boolean }>(
    'select cancel_requested from tasks where id = $1',
    [held!.id],
  );
  assert.equal(flagged.rows[0]?.cancel_requested, true);
  assert.equal(await claimTask(pool, worker, [lane]), null, 'not before the holder stopped');
  await completeTask(pool, {
    workerId: worker,
    taskId: held!.id,
    leaseId: held!.lease_id!,
    outcome: 'cancelled',
  });
  const next = await claimTask(pool, worker, [lane]);
  assert.equal(next?.job_id, newer!.id);
});

test('an org: group spans projects: a task of another project waits for it', async () => {
  const a = await makeProject(pool);
  const b = await makeProject(pool);
  const worker = await makeWorker(pool);
  const lane = newLane();
  const g = group('org:shared-db');
  const [first] = await jobsInGroup(a, lane, 1, g);
  const [other] = await jobsInGroup(b, lane, 1, g);
  const held = await claimTask(pool, worker, [lane]);
  assert.equal(held?.job_id, first!.id);
  assert.equal(await claimTask(pool, worker, [lane]), null, "project B's task waits for A's");
  // The same name without org: is a group per project.
  const own = newLane();
  await jobsInGroup(a, own, 1, group('shared-db'));
  await jobsInGroup(b, own, 1, group('shared-db'));
  assert.ok(await claimTask(pool, worker, [own]));
  assert.ok(await claimTask(pool, worker, [own]), 'another project, another group');
  await completeTask(pool, {
    workerId: worker,
    taskId: held!.id,
    leaseId: held!.lease_id!,
    outcome: 'success',
  });
  assert.equal((await claimTask(pool, worker, [lane]))?.job_id, other!.id);
});

test("a lost holder's slot is freed: its lease is taken over, and the group goes on", async () => {
  const project = await makeProject(pool);
  const worker = await makeWorker(pool);
  const lane = newLane();
  const [first, second] = await jobsInGroup(project, lane, 2, group('lost'));
  const held = await claimTask(pool, worker, [lane], { leaseS: 1 });
  assert.equal(held?.job_id, first!.id);
  await pool.query(
    `update tasks set lease_expires_at = now() - interval '1 second' where id = $1`,
    [held!.id],
  );
  // The takeover claims the lost task again: it keeps the slot, first in line.
  const again = await claimTask(pool, worker, [lane]);
  assert.equal(again?.id, held!.id);
  await completeTask(pool, {
    workerId: worker,
    taskId: again!.id,
    leaseId: again!.lease_id!,
    outcome: 'success',
  });
  assert.equal((await claimTask(pool, worker, [lane]))?.job_id, second!.id);
});

test("a pipeline's own group holds the whole job: the next job's tasks wait until it finishes", async () => {
  // Not superseded: the two jobs of one ref are the group's to order.
  const project = await makeProject(pool, { cancelSuperseded: false });
  const worker = await makeWorker(pool);
  const lane = newLane();
  const jobOf = async () => {
    const { job } = await createJob(pool, {
      projectId: project,
      ref: 'refs/heads/main',
      sha: 'a'.repeat(40),
      trigger: 'push',
      trusted: true,
    });
    await startJob(pool, job.id, {
      name: null,
      tasks: [laneSpec(lane, 'a', { position: 0 }), laneSpec(lane, 'b', { position: 1 })],
      concurrency: group('release-main'),
    });
    return job;
  };
  const first = await jobOf();
  const second = await jobOf();
  const a = await claimTask(pool, worker, [lane]);
  assert.equal(a?.job_id, first.id);
  // The first job holds the group: its second task is claimed, the other job's are not.
  const b = await claimTask(pool, worker, [lane]);
  assert.equal(b?.job_id, first.id);
  assert.equal(await claimTask(pool, worker, [lane]), null);
  const waiting = await getJobView(pool, second.id);
  assert.match(
    waiting.tasks[0]?.queue_reason ?? '',
    /^waiting for group release-main, held by job #\d+, position 1$/,
  );
  for (const task of [a!, b!]) {
    await completeTask(pool, {
      workerId: worker,
      taskId: task.id,
      leaseId: task.lease_id!,
      outcome: 'success',
    });
  }
  assert.equal((await getJobView(pool, first.id)).job.state, 'success');
  assert.equal((await claimTask(pool, worker, [lane]))?.job_id, second.id);
});

test("a pipeline's group with cancel_running cancels the older running job of the group", async () => {
  const project = await makeProject(pool, { cancelSuperseded: false });
  const worker = await makeWorker(pool);
  const lane = newLane();
  const jobOf = async () => {
    const { job } = await createJob(pool, {
      projectId: project,
      ref: 'refs/heads/x',
      sha: 'b'.repeat(40),
      trigger: 'push',
      trusted: true,
    });
    await startJob(pool, job.id, {
      name: null,
      tasks: [laneSpec(lane, 'a')],
      concurrency: group('deploy', { mode: 'cancel_running' }),
    });
    return job;
  };
  const first = await jobOf();
  assert.equal((await claimTask(pool, worker, [lane]))?.job_id, first.id);
  const second = await jobOf();
  const old = await getJobView(pool, first.id);
  assert.equal(old.job.state, 'cancelled');
  assert.match(old.job.error ?? '', /^cancelled by job #\d+ in group deploy \(cancel_running\)$/);
  assert.equal((await claimTask(pool, worker, [lane]))?.job_id, second.id);
});
