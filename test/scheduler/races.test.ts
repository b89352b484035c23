// Races on a real PostgreSQL: every racer has its own connection, all of them
// are opened before the race starts, and the racers are released together.
// Most races also pass a gate (gatedRace): a table they all write is locked
// until every racer is blocked inside its statement, as pg_stat_activity
// shows, so the test knows they overlapped. Which racer wins is left to the
// server: the tests assert what holds whoever wins (test/scheduler/
// forced-races.test.ts forces each outcome), and print how the wins fell. Each test proves one trap of the design brief absent
// ("Transactions" and "Lifecycle"): double or missing settles, stranded
// children, double claims, a completion reviving a cancelled job, a compile
// started twice, a delivery creating two jobs.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { type Pool, transaction } from '../../lib/db/index.ts';
import {
  type ClaimedTask,
  type CompletionResult,
  cancelJob,
  cancelJobsTx,
  claimTask,
  completeTask,
  createJob,
  type NewJob,
  type SweepSummary,
  startJob,
  sweep,
} from '../../lib/scheduler/index.ts';
import type { JobRow } from '../../lib/scheduler/types.ts';
import { testDatabase } from '../helpers/db.ts';
import { makeProject, makeWorker, sha, startedJob } from '../helpers/fixtures.ts';
import {
  claimAll,
  claimedJob,
  fulfilled,
  gatedRace,
  holdRows,
  laneSpec,
  lockWaiters,
  newLane,
  race,
  raceCancel,
  settle,
  sleep,
  takeTurnWithOtherRaceFiles,
  until,
  untilWaiting,
  withRacers,
} from '../helpers/race.ts';

// The file's own pool stays small: racers get dedicated pools, and PostgreSQL 15
// runs with max_connections 100.
await takeTurnWithOtherRaceFiles();
const { pool, url } = await testDatabase(import.meta.filename, { poolMax: 4 });
const racing = { url, applicationName: 'conductor-races' };

function succeed(racers: Pool, task: ClaimedTask): Promise<CompletionResult> {
  return completeTask(racers, {
    workerId: task.worker_id!,
    taskId: task.id,
    leaseId: task.lease_id!,
    outcome: 'success',
    exitCode: 0,
  });
}

async function taskStates(jobId: string): Promise<Record<string, number>> {
  const { rows } = await pool.query<{ state: string; n: number }>(
    'select state, count(*) as n from tasks where job_id = $1 group by state',
    [jobId],
  );
  return Object.fromEntries(rows.map((r) => [r.state, r.n]));
}

async function jobRow(jobId: string): Promise<{ state: string; finished_at: Date | null }> {
  const { rows } = await pool.query('select state, finished_at from jobs where id = $1', [jobId]);
  return rows[0];
}

// 1. Settle: of simultaneous last completions at least one sees all siblings
// finished, and only the one whose UPDATE moved the job reports it.
for (const [siblings, rounds] of [
  [8, 10],
  [64, 3],
] as const) {
  test(`${siblings} sibling tasks completed at the same moment settle the job exactly once (${rounds} rounds)`, async () => {
    const project = await makeProject(pool);
    const worker = await makeWorker(pool);
    await withRacers(racing, siblings, async (racers) => {
      for (let round = 0; round < rounds; round++) {
        const { job, claimed } = await claimedJob(pool, project, worker, siblings);

        const results = fulfilled(
          await gatedRace(
            pool,
            racing,
            'task_attempts',
            claimed.map((task) => () => succeed(racers, task)),
          ),
          'completion',
        );

        assert.deepEqual(
          results.map((r) => r.state),
          claimed.map(() => 'success'),
        );
        const settled = results.filter((r) => r.job_state !== null);
        assert.equal(settled.length, 1, 'exactly one completion reports the settle');
        assert.equal(settled[0]!.job_state, 'success');
        const row = await jobRow(job.id);
        assert.equal(row.state, 'success');
        assert.ok(row.finished_at);
        assert.deepEqual(await taskStates(job.id), { success: siblings });
      }
    });
  });
}

// 2. Promotion: two parents finishing at once, each in a snapshot that may
// still see the other running, must not both decide "not yet".
test('two parents of one child completed at the same moment promote the child exactly once, 200 times', async () => {
  const jobs = 200;
  const project = await makeProject(pool);
  const worker = await makeWorker(pool);
  const lane = newLane();
  const jobIds: string[] = [];
  for (let i = 0; i < jobs; i++) {
    const job = await startedJob(pool, project, [
      laneSpec(lane, 'left'),
      laneSpec(lane, 'right'),
      laneSpec(lane, 'child', { needs: ['left', 'right'] }),
    ]);
    jobIds.push(job.id);
  }
  const claimed = await claimAll(pool, worker, lane, 2 * jobs);
  const parents = new Map<string, ClaimedTask[]>();
  for (const task of claimed) parents.set(task.job_id, [...(parents.get(task.job_id) ?? []), task]);
  assert.equal(parents.size, jobs);

  await withRacers(racing, 2, async (racers) => {
    for (const jobId of jobIds) {
      const pair = parents.get(jobId)!;
      assert.deepEqual(pair.map((t) => t.name).sort(), ['left', 'right']);
      const results = fulfilled(
        await gatedRace(
          pool,
          racing,
          'task_attempts',
          pair.map((task) => () => succeed(racers, task)),
        ),
        'completion',
      );
      assert.deepEqual(
        results.map((r) => [r.state, r.job_state]),
        [
          ['success', null],
          ['success', null],
        ],
        'the job goes on running: its child is still to do',
      );
    }
  });

  const { rows } = await pool.query<{
    job_id: string;
    rows: number;
    state: string;
    attempt: number;
    queued: boolean;
    job_state: string;
  }>(
    `select t.job_id, count(*) over (partition by t.job_id) as rows, t.state, t.attempt,
            t.queued_at is not null as queued, j.state as job_state
       from tasks t join jobs j on j.id = t.job_id
      where t.job_id = any($1::uuid[]) and t.name = 'child'`,
    [jobIds],
  );
  assert.equal(rows.length, jobs, 'exactly one child row per job');
  const stranded = rows.filter((r) => r.state === 'waiting');
  assert.equal(stranded.length, 0, `children stranded in 'waiting' out of ${jobs}`);
  for (const r of rows) {
    assert.deepEqual(
      { rows: r.rows, state: r.state, attempt: r.attempt, queued: r.queued, job: r.job_state },
      { rows: 1, state: 'queued', attempt: 0, queued: true, job: 'running' },
      `child of job ${r.job_id}`,
    );
  }
  // Leave no queued children behind for the claims of later tests to scan past.
  await transaction(pool, (tx) => cancelJobsTx(tx, jobIds, 'test over'));
});

// 3. Fan-in: a thousand parents, completed by many connections at once, with no
// hot counter row and no 40001 storm surfacing as an error.
test('1,000 parents of one child completed by 64 concurrent completers queue the child once', async () => {
  const parents = 1000;
  const completers = 64;
  const project = await makeProject(pool);
  const worker = await makeWorker(pool);
  const lane = newLane();
  const names = Array.from({ length: parents }, (_, i) => `p${String(i).padStart(4, '0')}`);
  const job = await startedJob(pool, project, [
    ...names.map((name) => laneSpec(lane, name)),
    laneSpec(lane, 'join', { needs: names }),
  ]);
  const claimed = await claimAll(pool, worker, lane, parents);

  const results = await withRacers(racing, completers, async (racers) => {
    let next = 0;
    const done: CompletionResult[] = [];
    // The gate holds each completer's first completion until all are inside.
    const settled = await gatedRace(
      pool,
      racing,
      'task_attempts',
      Array.from({ length: completers }, () => async () => {
        // Each completer drains the shared list until it is empty.
        for (let i = next++; i < claimed.length; i = next++) {
          done.push(await succeed(racers, claimed[i]!));
        }
      }),
    );
    fulfilled(settled, 'completion');
    return done;
  });

  assert.equal(results.length, parents);
  assert.ok(results.every((r) => r.state === 'success'));
  assert.ok(
    results.every((r) => r.job_state === null),
    'no parent settles the job',
  );
  assert.deepEqual(await taskStates(job.id), { success: parents, queued: 1 });
  const { rows } = await pool.query(
    `select state, attempt from tasks where job_id = $1 and name = 'join'`,
    [job.id],
  );
  assert.deepEqual(rows, [{ state: 'queued', attempt: 0 }]);
  assert.equal((await jobRow(job.id)).state, 'running');

  const [child] = await claimAll(pool, worker, lane, 1);
  assert.equal(child!.name, 'join');
  const last = await succeed(pool, child!);
  assert.deepEqual([last.state, last.job_state], ['success', 'success']);
  assert.equal((await jobRow(job.id)).state, 'success');
});

// 4. Claim: SKIP LOCKED under REPEATABLE READ raises 40001 on rows claimed and
// committed after the snapshot; claimTask retries those and never errors.
for (const claimers of [32, 64]) {
  test(`${claimers} concurrent claimers take each of 1,000 queued tasks exactly once`, async (t) => {
    const project = await makeProject(pool);
    const lane = newLane();
    const jobIds: string[] = [];
    for (let j = 0; j < 100; j++) {
      const job = await startedJob(
        pool,
        project,
        Array.from({ length: 10 }, (_, i) => laneSpec(lane, `t${i}`)),
      );
      jobIds.push(job.id);
    }
    const workers = await Promise.all(
      Array.from({ length: claimers }, () => makeWorker(pool, [lane])),
    );

    let retries = 0;
    let exhausted = 0;
    const claims: Array<{ id: string; worker: string }> = [];
    // The gate on tasks holds every claimer's first claim until all are inside.
    const settled = await withRacers(racing, claimers, (racers) =>
      gatedRace(
        pool,
        racing,
        'tasks',
        workers.map((worker) => async () => {
          for (;;) {
            let tookRetries = 0;
            const task = await claimTask(racers, worker, [lane], {
              onRetries: (r) => {
                tookRetries = r;
                retries += r;
              },
            });
            if (task) {
              claims.push({ id: task.id, worker });
              continue;
            }
            if (tookRetries >= 10) exhausted++;
            // A claim that ran out of retries answers null too: stop only once
            // the database has nothing queued left.
            const { rows } = await racers.query<{ left: boolean }>(
              `select exists (select 1 from tasks
                               where state = 'queued' and job_id = any($1::uuid[])) as left`,
              [jobIds],
            );
            if (!rows[0]!.left) return;
          }
        }),
      ),
    );
    fulfilled(settled, 'claimer');

    t.diagnostic(
      `claim retries at concurrency ${claimers}: ${Math.round((retries * 1000) / claims.length)} per 1000 claims`,
    );
    t.diagnostic(
      `claims that ran out of retries at concurrency ${claimers}: ${exhausted} (answered null)`,
    );

    assert.equal(claims.length, 1000);
    assert.equal(new Set(claims.map((c) => c.id)).size, 1000, 'no task claimed twice');
    const { rows } = await pool.query<{
      id: string;
      state: string;
      attempt: number;
      worker_id: string;
      attempts: number;
    }>(
      `select t.id, t.state, t.attempt, t.worker_id,
              (select count(*) from task_attempts a where a.task_id = t.id) as attempts
         from tasks t where t.job_id = any($1::uuid[])`,
      [jobIds],
    );
    assert.equal(rows.length, 1000);
    const claimedBy = new Map(claims.map((c) => [c.id, c.worker]));
    for (const r of rows) {
      assert.deepEqual(
        { state: r.state, attempt: r.attempt, attempts: r.attempts, worker: r.worker_id },
        { state: 'running', attempt: 1, attempts: 1, worker: claimedBy.get(r.id) },
        `task ${r.id}`,
      );
    }
  });
}

// 5. Cancel against completions: cancel writes every running row, so a
// completion that read one before the cancel committed retries and records
// 'cancelled'; the job ends in one consistent terminal state either way.
test('a cancel racing 32 completions never lets a completion revive or settle the cancelled job', async (t) => {
  const rounds = 20;
  const width = 32;
  const project = await makeProject(pool);
  const worker = await makeWorker(pool);
  const outcomes = { cancelledMixed: 0, cancelledOnly: 0, cancelledAfterAll: 0, success: 0 };
  await withRacers(racing, width + 1, async (racers) => {
    for (let round = 0; round < rounds; round++) {
      const { job, claimed } = await claimedJob(pool, project, worker, width);
      // Each round's pattern picks the interleaving (see raceCancel); no
      // assertion depends on which side won which task. (A steady stream of
      // completions starves the cancel instead: see the stream-of-completions
      // test below.)
      const settled = await raceCancel(
        { pool, db: racing },
        racers,
        job.id,
        claimed,
        round % 4,
        (task) => succeed(racers, task),
      );
      const values = fulfilled(settled, 'completion or cancel');
      const cancelAnswer = values[0] as JobRow;
      const completions = values.slice(1) as CompletionResult[];

      const row = await jobRow(job.id);
      const states = await taskStates(job.id);
      const { rows: tasks } = await pool.query<{ id: string; state: string }>(
        'select id, state from tasks where job_id = $1',
        [job.id],
      );
      const taskState = new Map(tasks.map((t) => [t.id, t.state]));
      claimed.forEach((task, i) => {
        assert.equal(
          completions[i]!.state,
          taskState.get(task.id),
          'each completion answers its row',
        );
      });
      assert.equal(cancelAnswer.state, row.state, 'cancelJob answers the job as it ended');
      assert.ok(row.finished_at);
      const reported = completions.filter((c) => c.job_state !== null);

      if (row.state === 'cancelled') {
        assert.equal(states.running, undefined, 'no task left running');
        assert.deepEqual(
          Object.keys(states).filter((s) => s !== 'success' && s !== 'cancelled'),
          [],
          `every task ended success or cancelled: ${JSON.stringify(states)}`,
        );
        assert.deepEqual(reported, [], 'no completion settled a cancelled job');
        if (!states.cancelled) outcomes.cancelledAfterAll++;
        else if (states.success) outcomes.cancelledMixed++;
        else outcomes.cancelledOnly++;
      } else {
        assert.equal(
          row.state,
          'success',
          'the job is cancelled or, if all finished first, success',
        );
        assert.deepEqual(states, { success: width });
        assert.equal(reported.length, 1, 'exactly one completion settled the job');
        assert.equal(reported[0]!.job_state, 'success');
        outcomes.success++;
      }
    }
  });
  t.diagnostic(`cancel vs 32 completions over ${rounds} rounds: ${JSON.stringify(outcomes)}`);
});

// Guards a past bug the second review found: cancel cancelled waiting and
// queued tasks in one statement and flagged running ones in the next, so a task
// that a transient failure put back in the queue between the two was missed,
// and stayed queued in a cancelled job. Each round races a cancel against
// transient failures (attempts left) and lost leases swept back to the queue.
test('a cancel racing transient failures and lease expiries leaves nothing queued or unflagged', async (t) => {
  const rounds = 20;
  const width = 24;
  const project = await makeProject(pool);
  const worker = await makeWorker(pool);
  let requeuedFirst = 0;
  await withRacers(racing, width + 2, async (racers) => {
    for (let round = 0; round < rounds; round++) {
      const lane = newLane();
      const job = await startedJob(
        pool,
        project,
        Array.from({ length: width }, (_, i) =>
          laneSpec(lane, `t${i}`, { maxAttempts: 3, needs: i >= width - 4 ? ['t0'] : [] }),
        ),
      );
      const claimed = await claimAll(pool, worker, lane, width - 4);
      // Half of them will be found by the sweep with an expired lease.
      const lost = claimed.filter((_, i) => i % 2 === 1);
      await pool.query(
        `update tasks set lease_expires_at = now() - interval '1 second' where id = any($1::uuid[])`,
        [lost.map((t) => t.id)],
      );
      const failing = claimed.filter((_, i) => i % 2 === 0);
      // Even rounds: the cancel, the sweep and every failure inside their
      // statements at once, behind a gate on tasks. Odd rounds: random head
      // starts. Whether a requeue beats the cancel varies; the end must not.
      const gated = round % 2 === 0;
      const jitter = () => (gated ? Promise.resolve() : sleep(Math.random() * 6));
      const contenders = [
        async () => {
          await jitter();
          return cancelJob(racers, job.id, 'race');
        },
        () => sweep(racers, { lockTimeoutMs: 30_000 }),
        ...failing.map((task) => async () => {
          await jitter();
          return completeTask(racers, {
            workerId: task.worker_id!,
            taskId: task.id,
            leaseId: task.lease_id!,
            outcome: 'failed',
            transient: true,
          });
        }),
      ];
      const settled = gated
        ? await gatedRace<unknown>(pool, racing, 'tasks', contenders)
        : await race<unknown>(contenders);
      const answers = fulfilled(settled, 'cancel, sweep or completion');
      assert.equal((answers[1] as SweepSummary).errors, 0, 'no repair failed');
      const { rows } = await pool.query<{ state: string; cancel_requested: boolean; n: number }>(
        `select state, cancel_requested, count(*)::int as n from tasks where job_id = $1
          group by state, cancel_requested`,
        [job.id],
      );
      assert.equal((await jobRow(job.id)).state, 'cancelled');
      for (const r of rows) {
        assert.ok(
          r.state === 'cancelled' || (r.state === 'running' && r.cancel_requested),
          `every task is cancelled or told to stop: ${JSON.stringify(rows)}`,
        );
      }
      const attempts = await pool.query(
        `select count(*)::int as n from task_attempts a join tasks t on t.id = a.task_id
          where t.job_id = $1 and a.result_state = 'queued'`,
        [job.id],
      );
      if (attempts.rows[0].n > 0) requeuedFirst++;
    }
  });
  t.diagnostic(
    `cancel vs requeues: ${requeuedFirst} of ${rounds} rounds requeued a task before the cancel`,
  );
});

// The interleaving the second review found, forced with a held lock: the cancel
// is stopped half-way (another task's row is locked) while a transient failure
// of a running task tries to put it back in the queue, then the cancel goes on.
// It once left that task queued in the cancelled job. The cancel now locks the
// running tasks before it waits for the others, so the failure waits for the
// cancel and then records 'cancelled'; a cancel that did not would let it
// through to the queue first. Either way the cancel must end with both tasks
// cancelled.
test('a task requeued while a cancel is half-way is cancelled too', async () => {
  const project = await makeProject(pool);
  const worker = await makeWorker(pool);
  const lane = newLane();
  const job = await startedJob(pool, project, [
    laneSpec(lane, 'x', { maxAttempts: 3 }),
    laneSpec(lane, 'y'),
  ]);
  const x = await claimTask(pool, worker, [lane]);
  assert.equal(x?.name, 'x');
  const y = await pool.query<{ id: string }>(
    `select id from tasks where job_id = $1 and name = 'y'`,
    [job.id],
  );
  await withRacers(racing, 2, async (racers) => {
    const release = await holdRows(pool, 'tasks', [y.rows[0]!.id]);
    let cancel: Promise<PromiseSettledResult<unknown>> | undefined;
    let requeue: Promise<PromiseSettledResult<unknown>> | undefined;
    try {
      cancel = settle(cancelJob(racers, job.id, 'half-way'));
      await untilWaiting(pool, racing, 1);
      let requeueDone = false;
      requeue = settle(
        completeTask(racers, {
          workerId: worker,
          taskId: x!.id,
          leaseId: x!.lease_id!,
          outcome: 'failed',
          transient: true,
        }),
      ).finally(() => {
        requeueDone = true;
      });
      await until(
        'the transient failure waits for the cancel, or has been recorded',
        async () => requeueDone || (await lockWaiters(pool, racing)) >= 2,
      );
    } finally {
      await release();
    }
    fulfilled([await cancel, await requeue], 'cancel or transient failure');
  });
  const after = await pool.query<{ name: string; state: string }>(
    'select name, state from tasks where job_id = $1 order by name',
    [job.id],
  );
  assert.equal((await jobRow(job.id)).state, 'cancelled');
  assert.deepEqual(after.rows, [
    { name: 'x', state: 'cancelled' },
    { name: 'y', state: 'cancelled' },
  ]);
});

// Guards a past bug: cancelJobsTx ran at REPEATABLE READ, where its UPDATE of
// the running rows raised 40001 whenever one of them was completed after its
// snapshot, so the cancel committed only in a gap with no completion in flight.
// A job whose tasks kept completing starved its cancel (7 of 8 cancels, and 4
// of 8 superseding pushes, ran out of retries). It now runs at READ COMMITTED.
test('a cancel or a superseding push during a stream of completions succeeds', async () => {
  const width = 160;
  const project = await makeProject(pool);
  const worker = await makeWorker(pool);
  await withRacers(racing, 17, async (racers) => {
    for (const how of ['cancelJob', 'cancelJob', 'createJob', 'createJob'] as const) {
      const lane = newLane();
      const ref = `refs/heads/busy-${lane}`;
      const job = await startedJob(
        pool,
        project,
        Array.from({ length: width }, (_, i) => laneSpec(lane, `t${i}`)),
        { ref },
      );
      const claimed = await claimAll(pool, worker, lane, width);
      // The completions start 2 ms apart, a steady stream of about 0.3 s; the
      // cancel starts 10 ms in, so most of the job is still running. The last
      // completion waits for the cancel to return, so the job cannot finish
      // before the cancel, however the machine schedules the rest.
      let cancelled: () => void = () => {};
      const cancelReturned = new Promise<void>((r) => {
        cancelled = r;
      });
      const stop = async () => {
        await sleep(10);
        if (how === 'cancelJob') return cancelJob(racers, job.id, 'busy');
        const { superseded } = await createJob(racers, {
          projectId: project,
          ref,
          sha: sha(1),
          trigger: 'push',
          trusted: true,
        });
        assert.deepEqual(superseded, [job.id], 'the new push supersedes the busy job');
        return superseded;
      };
      const settled = await race<unknown>([
        () => stop().finally(cancelled),
        ...claimed.map((task, i) => async () => {
          await sleep(i * 2);
          if (i === width - 1) await cancelReturned;
          return succeed(racers, task);
        }),
      ]);
      const completions = fulfilled(settled, `completion or ${how}`).slice(1) as CompletionResult[];
      assert.equal((await jobRow(job.id)).state, 'cancelled');
      assert.equal((await taskStates(job.id)).running, undefined, 'no task left running');
      assert.deepEqual(
        completions.filter((c) => c.job_state !== null),
        [],
        'no completion settled the cancelled job',
      );
    }
  });
});

// 6. Compile: Lambda retries async invocations, so compile can run twice at once.
test('a compile started twice at the same moment starts the job once with each task once', async () => {
  const project = await makeProject(pool);
  const lane = newLane();
  const tasks = [
    laneSpec(lane, 'build', { position: 0 }),
    laneSpec(lane, 'test', { position: 1, needs: ['build'] }),
    laneSpec(lane, 'lint', { position: 2 }),
  ];
  await withRacers(racing, 2, async (racers) => {
    for (let round = 0; round < 20; round++) {
      const { job } = await createJob(pool, {
        projectId: project,
        ref: `refs/heads/compile-${round}`,
        sha: sha(round),
        trigger: 'push',
        trusted: true,
      });
      const answers = fulfilled(
        await gatedRace(
          pool,
          racing,
          'jobs',
          [0, 1].map(() => () => startJob(racers, job.id, { name: 'ci', tasks })),
        ),
        'start',
      );
      assert.deepEqual(
        answers.map((a) => a.started).sort(),
        [false, true],
        'exactly one compile starts the job',
      );
      for (const a of answers) assert.equal(a.state, 'running');
      const { rows } = await pool.query<{ name: string; state: string }>(
        'select name, state from tasks where job_id = $1 order by position',
        [job.id],
      );
      assert.deepEqual(rows, [
        { name: 'build', state: 'queued' },
        { name: 'test', state: 'waiting' },
        { name: 'lint', state: 'queued' },
      ]);
      const edges = await pool.query(
        `select count(*) as n
           from task_needs n join tasks t on t.id = n.task_id where t.job_id = $1`,
        [job.id],
      );
      assert.equal(edges.rows[0].n, 1);
      assert.equal((await jobRow(job.id)).state, 'running');
    }
  });
});

// 7. Deliveries: forges redeliver webhooks, sometimes at the same moment.
test('8 creations with the same delivery id at the same moment make one job and all answer it', async () => {
  const rounds = 10;
  const project = await makeProject(pool);
  await withRacers(racing, 8, async (racers) => {
    for (let round = 0; round < rounds; round++) {
      const deliveryId = `delivery-${round}-${randomBytes(4).toString('hex')}`;
      const input: NewJob = {
        projectId: project,
        ref: `refs/heads/d-${round}`,
        sha: sha(round),
        trigger: 'push',
        trusted: true,
        deliveryId,
      };
      const answers = fulfilled(
        await gatedRace(
          pool,
          racing,
          'projects',
          Array.from({ length: 8 }, () => () => createJob(racers, input)),
        ),
        'creation',
      );
      const { rows } = await pool.query<{ id: string; number: number }>(
        'select id, number from jobs where project_id = $1 and delivery_id = $2',
        [project, deliveryId],
      );
      assert.equal(rows.length, 1, 'one job for the delivery');
      assert.deepEqual(
        answers.map((a) => a.job.id),
        answers.map(() => rows[0]!.id),
        'every caller gets that job',
      );
      assert.equal(answers.filter((a) => !a.duplicate).length, 1, 'exactly one created it');
      assert.equal(rows[0]!.number, round + 1, 'losers took no number');
    }
  });
  const { rows } = await pool.query('select job_counter from projects where id = $1', [project]);
  assert.equal(rows[0].job_counter, rounds);
});

// Guards a past bug: createJob bumped projects.job_counter at REPEATABLE READ,
// so every creation that waited on the row raised 40001 once the holder
// committed; with 16 racers the default retries ran out in 17 of 20 races, and
// those pushes never became jobs. It now runs at READ COMMITTED.
test('16 concurrent creations with distinct delivery ids all succeed, numbered 1 to 16', async () => {
  await withRacers(racing, 16, async (racers) => {
    for (let round = 0; round < 5; round++) {
      const project = await makeProject(pool);
      const answers = fulfilled(
        await gatedRace(
          pool,
          racing,
          'projects',
          Array.from(
            { length: 16 },
            (_, i) => () =>
              createJob(racers, {
                projectId: project,
                ref: `refs/heads/n-${i}`,
                sha: sha(i),
                trigger: 'push',
                trusted: true,
                deliveryId: `distinct-${i}-${randomBytes(4).toString('hex')}`,
              }),
          ),
        ),
        'creation',
      );
      assert.ok(answers.every((a) => !a.duplicate));
      assert.equal(new Set(answers.map((a) => a.job.id)).size, 16);
      assert.deepEqual(
        answers.map((a) => a.job.number).sort((a, b) => a - b),
        Array.from({ length: 16 }, (_, i) => i + 1),
      );
      const { rows } = await pool.query(
        `select count(*) as n, max(number) as top,
                (select job_counter from projects where id = $1) as counter
           from jobs where project_id = $1`,
        [project],
      );
      assert.deepEqual(rows[0], { n: 16, top: 16, counter: 16 });
    }
  });
});
