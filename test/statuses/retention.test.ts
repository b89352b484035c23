// Retention on a database with old and new jobs: logs of jobs finished more
// than logDays ago go, jobs finished more than jobDays ago go with everything
// of theirs, in bounded batches; recent and unfinished jobs are never touched.
// Jobs are made through the stack (push, compile, a runner uploading logs) and
// then moved into the past through the pool.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runSweep } from '../../lib/app/sweep.ts';
import { purgeExpired } from '../../lib/scheduler/index.ts';
import { claimTask, complete, uploadLog, waitForJob } from '../e2e/calls.ts';
import { sha } from '../e2e/payloads.ts';
import {
  adminCall,
  compileFailed,
  makeProject,
  outboxIdle,
  pipelineFile,
  push,
  runTasks,
  type StatusProject,
  statusStack,
  whileDown,
} from './support.ts';

const { fake, stack } = await statusStack(import.meta.filename, {
  // runSweep reads these; the purgeExpired tests pass their own.
  CONDUCTOR_RETENTION_LOG_DAYS: '10',
  CONDUCTOR_RETENTION_JOB_DAYS: '20',
  // The old running job keeps its lease for the whole file.
  CONDUCTOR_LEASE_S: '3600',
});
const pool = stack.context.pool;
const p: StatusProject = await makeProject(stack, fake, 'github', 'retention');
const ONE_TASK = '  build:\n    script: [make]\n';

interface Made {
  jobId: string;
  taskId: string;
}

/** A job with one task that wrote `chunks` log chunks; finished (success) unless `running`. */
async function makeJob(name: string, chunks: number, running = false): Promise<Made> {
  const commit = sha(`retention-${name}`);
  fake.setFile(p.repo, commit, pipelineFile(p.label, ONE_TASK));
  const jobId = await push(stack, p, commit, `refs/heads/${name}`);
  await waitForJob(stack, jobId);
  const task = await claimTask(stack, p.runner);
  assert.equal(task.job_id, jobId);
  let offset = 0;
  for (let i = 0; i < chunks; i++) {
    const data = `${name}: line ${i + 1}\n`;
    const sent = await uploadLog(stack, p.runner, task.id, {
      lease_id: task.lease_id,
      offset,
      data,
    });
    assert.equal(sent.status, 200, sent.text);
    offset += Buffer.byteLength(data);
  }
  if (!running) {
    const done = await complete(stack, p.runner, task.id, {
      lease_id: task.lease_id,
      outcome: 'success',
      exit_code: 0,
    });
    assert.equal(done.body.job_state, 'success');
  }
  await outboxIdle(stack, jobId);
  return { jobId, taskId: task.id };
}

/** Moves a job `days` into the past: created, started and (if finished) finished then. */
async function backdate(jobId: string, days: number): Promise<void> {
  await pool.query(
    `update jobs set created_at = now() - make_interval(days => $2),
                     started_at = case when started_at is null then null
                                       else now() - make_interval(days => $2) end,
                     finished_at = case when finished_at is null then null
                                        else now() - make_interval(days => $2) + interval '1 minute' end
      where id = $1`,
    [jobId, days],
  );
}

/** A finished job (see makeJob) moved `days` into the past (see backdate). */
async function makeOldJob(name: string, chunks: number, days: number): Promise<Made> {
  const made = await makeJob(name, chunks);
  await backdate(made.jobId, days);
  return made;
}

async function count(sql: string, params: unknown[] = []): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(sql, params);
  return rows[0]!.n;
}

const chunksOf = (jobId: string) =>
  count(
    `select count(*)::int as n from log_chunks c join tasks t on t.id = c.task_id
      where t.job_id = $1`,
    [jobId],
  );
const totalChunks = () => count('select count(*)::int as n from log_chunks');
const totalJobs = () => count('select count(*)::int as n from jobs');

/**
 * Runs `purge` and checks that the counts it answers are exactly the log
 * chunks and jobs that went; answers its result.
 */
async function purgeCounted<T extends { log_chunks_purged: number; jobs_purged: number }>(
  purge: () => Promise<T>,
): Promise<T> {
  const chunksBefore = await totalChunks();
  const jobsBefore = await totalJobs();
  const result = await purge();
  assert.equal(chunksBefore - (await totalChunks()), result.log_chunks_purged);
  assert.equal(jobsBefore - (await totalJobs()), result.jobs_purged);
  return result;
}

/** What `remains` finds of a job that was purged whole. */
const GONE = { jobs: 0, tasks: 0, attempts: 0, chunks: 0, statuses: 0 };

/** What is left of a job in every table that holds a part of it. */
async function remains(jobId: string) {
  const { rows } = await pool.query<{
    jobs: number;
    tasks: number;
    attempts: number;
    chunks: number;
    statuses: number;
  }>(
    `select (select count(*)::int from jobs where id = $1) as jobs,
            (select count(*)::int from tasks where job_id = $1) as tasks,
            (select count(*)::int from task_attempts a join tasks t on t.id = a.task_id
              where t.job_id = $1) as attempts,
            (select count(*)::int from log_chunks c join tasks t on t.id = c.task_id
              where t.job_id = $1) as chunks,
            (select count(*)::int from status_outbox where job_id = $1) as statuses`,
    [jobId],
  );
  return rows[0]!;
}

// Made once, at the top: later tests check these are still untouched.
const recent = await makeJob('recent', 3);
const runningOld = await makeJob('running-old', 3, true);
await backdate(runningOld.jobId, 400);

// The compile of the pending job gave up for now.
const pendingOld = await whileDown(
  fake,
  500,
  async () => {
    const jobId = await push(stack, p, sha('retention-pending-old'), 'refs/heads/pending-old');
    await compileFailed(stack, jobId);
    return jobId;
  },
  { files: true },
);
await backdate(pendingOld, 400);

async function untouched(): Promise<void> {
  assert.equal(await chunksOf(recent.jobId), 3, 'a recent job keeps its logs');
  assert.equal(await chunksOf(runningOld.jobId), 3, 'an old running job keeps its logs');
  const { rows } = await pool.query<{ id: string; state: string }>(
    'select id, state from jobs where id = any($1::uuid[]) order by state',
    [[recent.jobId, runningOld.jobId, pendingOld]],
  );
  assert.deepEqual(
    rows.map((r) => r.state),
    ['pending', 'running', 'success'],
    'old unfinished jobs and recent ones are all still there',
  );
}

test('purgeExpired deletes the logs of jobs past logDays and the jobs past jobDays with everything of theirs, never recent or unfinished jobs, and counts what went', async () => {
  const old1 = await makeJob('old-1', 3);
  // A recent rerun of a job about to expire outlives it.
  const rerun = await adminCall(stack, 'POST', `/v1/jobs/${old1.jobId}/rerun`, 202, {});
  await runTasks(stack, p);
  await backdate(old1.jobId, 400);
  const old2 = await makeOldJob('old-2', 3, 300);
  const mid = await makeOldJob('mid', 3, 60);
  const edge = await makeOldJob('edge', 3, 29);
  assert.ok((await remains(old1.jobId)).statuses > 0, 'the old job has outbox rows to lose');

  const purged = await purgeCounted(() => purgeExpired(pool, { logDays: 30, jobDays: 180 }));
  assert.deepEqual(purged, { log_chunks_purged: 9, jobs_purged: 2 });

  for (const gone of [old1, old2]) assert.deepEqual(await remains(gone.jobId), GONE);
  const { rows } = await pool.query('select rerun_of from jobs where id = $1', [rerun.body.job_id]);
  assert.deepEqual(rows, [{ rerun_of: null }]);

  // Past logDays only: the job, its task and outcome stay; its log is empty.
  const kept = await remains(mid.jobId);
  assert.deepEqual(kept, { jobs: 1, tasks: 1, attempts: 1, chunks: 0, statuses: kept.statuses });
  const view = await adminCall(stack, 'GET', `/v1/jobs/${mid.jobId}`, 200);
  assert.equal(view.body.job.state, 'success');
  assert.equal(view.body.tasks[0].state, 'success');
  const log = await adminCall(stack, 'GET', `/v1/tasks/${mid.taskId}/log`, 200);
  assert.equal(log.text, '');

  assert.equal(await chunksOf(edge.jobId), 3, 'a job 29 days old keeps its logs');
  await untouched();

  assert.deepEqual(await purgeExpired(pool, { logDays: 30, jobDays: 180 }), {
    log_chunks_purged: 0,
    jobs_purged: 0,
  });
});

test('with a small batch and one batch per call, each call purges a bounded amount and later calls the rest', async () => {
  const old = [
    await makeOldJob('b-old-1', 2, 500),
    await makeOldJob('b-old-2', 2, 490),
    await makeOldJob('b-old-3', 2, 480),
  ];
  const mid = [await makeOldJob('b-mid-1', 2, 100), await makeOldJob('b-mid-2', 2, 100)];
  const due = [...old, ...mid];
  const dueChunks = async () => {
    let n = 0;
    for (const job of due) n += await chunksOf(job.jobId);
    return n;
  };
  assert.equal(await dueChunks(), 10);

  // batch 4: at most 4 chunks and max(1, 4 / 10) = 1 job per batch.
  const opts = { logDays: 30, jobDays: 180, batch: 4, maxBatches: 1 };
  const calls: { log_chunks_purged: number; jobs_purged: number }[] = [];
  for (let i = 0; i < 10; i++) {
    const chunksBefore = await totalChunks();
    const jobsBefore = await totalJobs();
    const dueBefore = await dueChunks();
    const present = new Set(
      (
        await pool.query<{ id: string }>('select id from jobs where id = any($1::uuid[])', [
          old.map((j) => j.jobId),
        ])
      ).rows.map((r) => r.id),
    );
    const result = await purgeExpired(pool, opts);
    calls.push(result);
    assert.ok(result.log_chunks_purged <= 4, `a call purged ${result.log_chunks_purged} chunks`);
    assert.ok(result.jobs_purged <= 1, `a call purged ${result.jobs_purged} jobs`);
    assert.equal(jobsBefore - (await totalJobs()), result.jobs_purged);
    // Chunks go by the chunk batch, plus those of the deleted job by cascade.
    const went = chunksBefore - (await totalChunks());
    assert.equal(went, dueBefore - (await dueChunks()), 'only due jobs lost chunks');
    assert.ok(went >= result.log_chunks_purged && went <= result.log_chunks_purged + 2);
    if (result.jobs_purged === 1) {
      // The oldest first.
      const oldest = old.find((j) => present.has(j.jobId))!;
      assert.equal((await remains(oldest.jobId)).jobs, 0);
    }
    if (result.log_chunks_purged === 0 && result.jobs_purged === 0) break;
  }
  assert.ok(calls.length >= 4, `it took ${calls.length} calls`);
  assert.deepEqual(calls[0], { log_chunks_purged: 4, jobs_purged: 1 }, 'the first call is bounded');
  assert.deepEqual(calls.at(-1), { log_chunks_purged: 0, jobs_purged: 0 });
  assert.equal(
    calls.reduce((n, c) => n + c.jobs_purged, 0),
    3,
  );
  for (const job of old) assert.equal((await remains(job.jobId)).jobs, 0);
  for (const job of mid) {
    const left = await remains(job.jobId);
    assert.equal(left.jobs, 1);
    assert.equal(left.chunks, 0);
  }
  await untouched();
});

test('runSweep purges with CONDUCTOR_RETENTION_LOG_DAYS and _JOB_DAYS and reports log_chunks_purged and jobs_purged', async () => {
  const logsOnly = await makeOldJob('s-15-days', 2, 15);
  const whole = await makeOldJob('s-25-days', 2, 25);
  const fresh = await makeOldJob('s-5-days', 2, 5);

  // What is due under 10 and 20 days, whatever earlier tests left.
  const expectChunks = await count(
    `select count(*)::int as n from log_chunks c join tasks t on t.id = c.task_id
       join jobs j on j.id = t.job_id where j.finished_at < now() - interval '10 days'`,
  );
  const expectJobs = await count(
    `select count(*)::int as n from jobs where finished_at < now() - interval '20 days'`,
  );
  assert.ok(expectChunks >= 4 && expectJobs >= 1);

  const summary = await purgeCounted(() => runSweep(stack.context));
  assert.equal(summary.log_chunks_purged, expectChunks);
  assert.equal(summary.jobs_purged, expectJobs);

  assert.deepEqual(await remains(whole.jobId), GONE);
  const left = await remains(logsOnly.jobId);
  assert.equal(left.jobs, 1);
  assert.equal(left.chunks, 0);
  assert.equal(await chunksOf(fresh.jobId), 2);
  assert.equal(await chunksOf(runningOld.jobId), 3);
  assert.equal(await count('select count(*)::int as n from jobs where id = $1', [pendingOld]), 1);

  const again = await runSweep(stack.context);
  assert.equal(again.log_chunks_purged, 0);
  assert.equal(again.jobs_purged, 0);
});
