// Races on a real PostgreSQL against the one-statement fast paths: the claim
// (conductor_claim, a volatile plpgsql function whose statements each read
// with a snapshot of their own), the 'success' completion
// (conductor_complete_success: task, attempt and outputs), the follow-up (one
// statement that settles the job with its status, and only falls back to the
// READ COMMITTED follow-up transaction when a child is ready) and the worker
// check that marks the worker seen.
//
// Every racer has its own connection, opened before the race, and racers are
// released together; most races also pass a gate (gatedRace) that proves they
// overlapped, and assert only what holds whichever racer wins
// (forced-races.test.ts forces each outcome). An audit trigger, created in this file's own database
// only, records every state change of jobs and tasks, so the tests can assert
// "exactly once" on transitions rather than on end states alone. One test
// stalls a claim between its statement snapshot and the claim function's
// snapshots (a wrapper that waits on an advisory lock, then calls the real
// function) to force the interleaving a busy server produces only rarely.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { requireWorker } from '../../lib/app/workers.ts';
import { type Pool, transaction } from '../../lib/db/index.ts';
import { ConflictError, UnauthorizedError } from '../../lib/errors.ts';
import { hashToken } from '../../lib/http/auth.ts';
import type { HttpEvent } from '../../lib/http/index.ts';
import {
  type ClaimedTask,
  type Completion,
  type CompletionResult,
  cancelJob,
  cancelJobsTx,
  claimTask,
  completeTask,
  type SweepSummary,
  sweep,
} from '../../lib/scheduler/index.ts';
import { testDatabase } from '../helpers/db.ts';
import { makeWorker, startedJob } from '../helpers/fixtures.ts';
import {
  assertTransitions,
  claimAll,
  claimedJob,
  describeError,
  finalStatuses,
  forgeProject,
  fulfilled,
  gatedRace,
  installAudit,
  laneSpec,
  newLane,
  race,
  raceCancel,
  racePool,
  sleep,
  takeTurnWithOtherRaceFiles,
  untilWaiting,
  withRacers,
} from '../helpers/race.ts';

await takeTurnWithOtherRaceFiles();
const db = await testDatabase(import.meta.filename, { poolMax: 6 });
const { pool } = db;
const racing = { url: db.url, applicationName: 'conductor-fastpath-races' };

await installAudit(pool);

// The stall: connections whose search_path starts with `stall` resolve the
// claim's unqualified call to this wrapper, which waits for an advisory lock
// the test holds and then calls the real function. The claim statement's own
// snapshot is taken before the wait, the real function's query after it.
const STALL_KEY = 7_341_001;
await pool.query(`
  create schema stall;
  create function stall.conductor_claim(p_worker uuid, p_labels text[], p_lease_s integer,
                                        p_lease_id uuid, p_key text)
  returns setof public.conductor_claimed
  language plpgsql volatile as $$
  begin
    perform pg_advisory_xact_lock_shared(${STALL_KEY});
    return query select * from public.conductor_claim(p_worker, p_labels, p_lease_s,
                                                      p_lease_id, p_key);
  end $$;
`);

function complete(
  db: Pool,
  task: ClaimedTask,
  outcome: Completion['outcome'] = 'success',
  outputs: Record<string, string> = {},
): Promise<CompletionResult> {
  return completeTask(db, {
    workerId: task.worker_id!,
    taskId: task.id,
    leaseId: task.lease_id!,
    outcome,
    exitCode: outcome === 'success' ? 0 : 1,
    outputs,
  });
}

function shuffled<T>(items: T[]): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

// 1. Settle through the one-statement follow-up: the last tasks of many jobs
// complete at once, through the fast path ('success') and the transaction
// (failures) side by side. Every job settles once, one completion reports it,
// and its project gets exactly one final commit status.
test('the last tasks of 48 jobs completed at once settle each job once, with one status each', async () => {
  const project = await forgeProject(pool);
  const worker = await makeWorker(pool);
  const lane = newLane();
  const kinds = ['pass', 'fail', 'allowed'] as const;
  const jobs: Array<{ id: string; kind: (typeof kinds)[number] }> = [];
  for (let j = 0; j < 48; j++) {
    const kind = kinds[j % 3]!;
    const job = await startedJob(pool, project, [
      laneSpec(lane, 't0'),
      laneSpec(lane, 't1'),
      laneSpec(lane, 't2', { allowFailure: kind === 'allowed' }),
    ]);
    jobs.push({ id: job.id, kind });
  }
  const kindOf = new Map(jobs.map((j) => [j.id, j.kind]));
  const claimed = await claimAll(pool, worker, lane, 3 * jobs.length);
  const outcomeOf = (t: ClaimedTask) =>
    t.name === 't2' && kindOf.get(t.job_id) !== 'pass' ? 'failed' : 'success';

  const order = shuffled(claimed);
  const results = await withRacers(racing, 48, async (racers) =>
    fulfilled(
      await gatedRace(
        pool,
        racing,
        'task_attempts',
        order.map((task) => () => complete(racers, task, outcomeOf(task))),
        48,
      ),
      'completion',
    ),
  );

  const expected = {
    pass: { job: 'success', status: 'success', description: '3 passed' },
    fail: { job: 'failed', status: 'failure', description: '2 passed, 1 failed' },
    allowed: { job: 'success', status: 'success', description: '2 passed, 1 allowed to fail' },
  };
  order.forEach((task, i) => {
    assert.equal(results[i]!.state, outcomeOf(task), `completion of ${task.name}`);
  });
  const statuses = await finalStatuses(
    pool,
    jobs.map((j) => j.id),
  );
  const { rows } = await pool.query<{ id: string; state: string }>(
    'select id, state from jobs where id = any($1::uuid[])',
    [jobs.map((j) => j.id)],
  );
  const stateOf = new Map(rows.map((r) => [r.id, r.state]));
  for (const job of jobs) {
    const want = expected[job.kind];
    const reports = results.filter((r) => r.job_id === job.id && r.job_state !== null);
    assert.deepEqual(
      reports.map((r) => r.job_state),
      [want.job],
      `exactly one completion of job ${job.id} (${job.kind}) reports the settle`,
    );
    assert.equal(stateOf.get(job.id), want.job);
    assert.deepEqual(
      statuses.get(job.id),
      [{ state: want.status, description: want.description }],
      `exactly one final status for job ${job.id} (${job.kind})`,
    );
  }
  await assertTransitions(
    pool,
    jobs.map((j) => j.id),
  );
});

// 2. Promotion through the follow-up statement's "is a child ready?" answer:
// many parents of one child, in many jobs at once, all completing together
// with outputs. Each child is promoted once, is claimable once, and its claim
// carries every parent's output.
test('12 parents of one child in each of 16 jobs, completed at once, promote each child once with every output', async () => {
  const parents = 12;
  const project = await forgeProject(pool);
  const worker = await makeWorker(pool);
  const lane = newLane();
  const names = Array.from({ length: parents }, (_, i) => `p${String(i).padStart(2, '0')}`);
  const jobIds: string[] = [];
  for (let j = 0; j < 16; j++) {
    const job = await startedJob(pool, project, [
      ...names.map((name) => laneSpec(lane, name, { outputs: ['v'] })),
      laneSpec(lane, 'join', { needs: names }),
    ]);
    jobIds.push(job.id);
  }
  const claimed = await claimAll(pool, worker, lane, parents * jobIds.length);
  const value = (t: { job_id: string; name: string }) => `${t.job_id}/${t.name}`;

  const results = await withRacers(racing, 48, async (racers) =>
    fulfilled(
      await gatedRace(
        pool,
        racing,
        'task_attempts',
        shuffled(claimed).map(
          (task) => () => complete(racers, task, 'success', { v: value(task) }),
        ),
        48,
      ),
      'completion',
    ),
  );
  assert.ok(
    results.every((r) => r.state === 'success' && r.job_state === null),
    'every parent succeeded and none settled its job',
  );

  const { rows: joins } = await pool.query<{ job_id: string; state: string; attempt: number }>(
    `select job_id, state, attempt from tasks where job_id = any($1::uuid[]) and name = 'join'`,
    [jobIds],
  );
  assert.deepEqual(
    joins.filter((j) => j.state !== 'queued' || j.attempt !== 0),
    [],
    "every child is queued, unclaimed (none stranded in 'waiting')",
  );

  const children = await claimAll(pool, worker, lane, jobIds.length);
  assert.equal(new Set(children.map((c) => c.job_id)).size, jobIds.length, 'one child per job');
  for (const child of children) {
    assert.equal(child.name, 'join');
    assert.deepEqual(
      child.needs_outputs,
      Object.fromEntries(names.map((n) => [n, { v: value({ job_id: child.job_id, name: n }) }])),
      `the child of job ${child.job_id} gets every parent's output`,
    );
  }

  const last = await withRacers(racing, 16, async (racers) =>
    fulfilled(
      await gatedRace(
        pool,
        racing,
        'task_attempts',
        children.map((c) => () => complete(racers, c)),
      ),
      'completion',
    ),
  );
  assert.deepEqual(
    last.map((r) => r.job_state),
    children.map(() => 'success'),
    "each child's completion settles its job",
  );
  const statuses = await finalStatuses(pool, jobIds);
  for (const jobId of jobIds) {
    assert.deepEqual(statuses.get(jobId), [
      { state: 'success', description: `${parents + 1} passed` },
    ]);
  }
  await assertTransitions(pool, jobIds);
});

// 2b. The follow-up transaction at READ COMMITTED failing a child (an output
// its producer declared and did not give) while sibling follow-ups race to
// settle: the child fails once, the job fails once, one status.
test('a fan-in whose producer left out its output fails the child and the job exactly once', async () => {
  const parents = 8;
  const project = await forgeProject(pool);
  const worker = await makeWorker(pool);
  const lane = newLane();
  const names = Array.from({ length: parents }, (_, i) => `p${i}`);
  const jobIds: string[] = [];
  for (let j = 0; j < 12; j++) {
    const job = await startedJob(pool, project, [
      ...names.map((name, i) => laneSpec(lane, name, { outputs: i === 0 ? ['v'] : [] })),
      laneSpec(lane, 'join', { needs: names }),
      laneSpec(lane, 'after', { needs: ['join'] }),
    ]);
    jobIds.push(job.id);
  }
  const claimed = await claimAll(pool, worker, lane, parents * jobIds.length);
  const results = await withRacers(racing, 48, async (racers) =>
    fulfilled(
      await gatedRace(
        pool,
        racing,
        'task_attempts',
        shuffled(claimed).map((task) => () => complete(racers, task)),
        48,
      ),
      'completion',
    ),
  );
  const { rows } = await pool.query<{ job_id: string; name: string; state: string; error: string }>(
    `select job_id, name, state, error from tasks
      where job_id = any($1::uuid[]) and name in ('join', 'after')`,
    [jobIds],
  );
  const statuses = await finalStatuses(pool, jobIds);
  for (const jobId of jobIds) {
    const reports = results.filter((r) => r.job_id === jobId && r.job_state !== null);
    assert.deepEqual(
      reports.map((r) => r.job_state),
      ['failed'],
      `one completion reports job ${jobId} failed`,
    );
    const tasks = rows.filter((r) => r.job_id === jobId);
    assert.deepEqual(tasks.map((t) => [t.name, t.state, t.error]).sort(), [
      ['after', 'skipped', 'skipped: join failed'],
      ['join', 'failed', 'needs output "v" of "p0", which finished without it'],
    ]);
    assert.deepEqual(statuses.get(jobId), [
      { state: 'failure', description: `${parents} passed, 1 failed, 1 skipped` },
    ]);
  }
  assert.equal(await claimTask(pool, worker, [lane]), null, 'the failed child is never claimable');
  await assertTransitions(pool, jobIds);
});

// 3. Cancel against 'success' completions on the fast path and the promotions
// their follow-ups start. The fast path's UPDATE waits for the cancel's row
// lock and re-checks `not cancel_requested`; a success recorded after the
// flag would be a completion that ignored the cancel.
test('a cancel racing 24 success completions and their promotions ends cancelled, with no success after the flag', async (t) => {
  const rounds = 12;
  const width = 24;
  const project = await forgeProject(pool);
  const worker = await makeWorker(pool);
  const mix = { mixed: 0, allCancelled: 0, allSucceeded: 0 };
  const jobIds: string[] = [];
  await withRacers(racing, width + 1, async (racers) => {
    for (let round = 0; round < rounds; round++) {
      const lane = newLane();
      const parents = Array.from({ length: width }, (_, i) => laneSpec(lane, `t${i}`));
      // Four children, each needing six parents: their promotions lock the job
      // and then the child, the order a cancel takes.
      const children = Array.from({ length: 4 }, (_, k) =>
        laneSpec(lane, `c${k}`, {
          needs: Array.from({ length: 6 }, (_, i) => `t${k * 6 + i}`),
        }),
      );
      const job = await startedJob(pool, project, [...parents, ...children]);
      jobIds.push(job.id);
      const claimed = await claimAll(pool, worker, lane, width);
      // The round's pattern picks the interleaving (see raceCancel); no
      // assertion depends on which side won which task.
      const settled = await raceCancel(
        { pool, db: racing },
        racers,
        job.id,
        claimed,
        round % 4,
        (task) => complete(racers, task),
      );
      const completions = fulfilled(settled, 'completion or cancel').slice(1) as CompletionResult[];

      const { rows: tasks } = await pool.query<{
        id: string;
        name: string;
        state: string;
        cancel_requested: boolean;
      }>('select id, name, state, cancel_requested from tasks where job_id = $1', [job.id]);
      const byId = new Map(tasks.map((t) => [t.id, t]));
      claimed.forEach((task, i) => {
        assert.equal(completions[i]!.state, byId.get(task.id)!.state, 'each answer is its row');
      });
      const { rows: jobRows } = await pool.query('select state from jobs where id = $1', [job.id]);
      assert.equal(jobRows[0].state, 'cancelled', 'the children never ran: the job is cancelled');
      assert.deepEqual(
        completions.filter((c) => c.job_state !== null),
        [],
        'no completion settled the cancelled job',
      );
      for (const t of tasks) {
        assert.ok(
          t.state === 'success' || t.state === 'cancelled',
          `task ${t.name} ended ${t.state}`,
        );
        assert.ok(
          !(t.state === 'success' && t.cancel_requested),
          `task ${t.name} was recorded as a success after its cancel flag was set`,
        );
      }
      for (const k of [0, 1, 2, 3]) {
        assert.equal(tasks.find((t) => t.name === `c${k}`)!.state, 'cancelled');
      }
      const statuses = await finalStatuses(pool, [job.id]);
      assert.deepEqual(
        statuses.get(job.id)!.map((s) => s.state),
        ['error'],
        'the cancel alone posts a final status',
      );
      const succeeded = completions.filter((c) => c.state === 'success').length;
      if (succeeded === 0) mix.allCancelled++;
      else if (succeeded === width) mix.allSucceeded++;
      else mix.mixed++;
    }
  });
  await assertTransitions(pool, jobIds);
  t.diagnostic(
    `cancel vs ${width} success completions over ${rounds} rounds: ${JSON.stringify(mix)}`,
  );
});

// The same interleaving forced: the cancel has flagged the running task but
// not committed, and a 'success' completion's one-statement UPDATE waits for
// that row. Once the cancel commits, the UPDATE re-checks the new row version
// (EvalPlanQual), matches nothing, and the completion records 'cancelled'.
test("a success completion that waited for a cancel's row lock records cancelled", async () => {
  const project = await forgeProject(pool);
  const worker = await makeWorker(pool);
  const lane = newLane();
  const job = await startedJob(pool, project, [laneSpec(lane, 'x')]);
  const [task] = await claimAll(pool, worker, lane, 1);
  const result = await withRacers(racing, 2, async (racers) => {
    let completion: Promise<CompletionResult> | undefined;
    await transaction(
      racers,
      async (tx) => {
        assert.deepEqual(await cancelJobsTx(tx, [job.id], 'held'), [job.id]);
        completion = complete(racers, task!);
        await untilWaiting(pool, racing, 1);
      },
      { isolation: 'read committed' },
    );
    return completion!;
  });
  assert.deepEqual([result.state, result.job_state], ['cancelled', null]);
  const { rows } = await pool.query(
    `select t.state, t.cancel_requested, a.outcome, a.reported_outcome
       from tasks t join task_attempts a on a.task_id = t.id and a.attempt = t.attempt
      where t.id = $1`,
    [task!.id],
  );
  assert.deepEqual(rows, [
    {
      state: 'cancelled',
      cancel_requested: true,
      outcome: 'cancelled',
      reported_outcome: 'success',
    },
  ]);
  const statuses = await finalStatuses(pool, [job.id]);
  assert.deepEqual(
    statuses.get(job.id)!.map((s) => s.state),
    ['error'],
  );
  await assertTransitions(pool, [job.id]);
});

// 4. Lease expiry against the fast path: the sweep requeues a task whose lease
// ran out while its runner reports success. Either the success is recorded
// (and the sweep leaves the task alone) or the lease is gone (and the runner
// hears 409); never both, never neither. The job settles once in the end.
test('a sweep expiring leases races 16 success completions: each task is either a success or requeued, never both', async (t) => {
  const rounds = 8;
  const width = 16;
  const project = await forgeProject(pool);
  const worker = await makeWorker(pool);
  const tally = { won: 0, lost: 0 };
  await withRacers(racing, width + 2, async (racers) => {
    for (let round = 0; round < rounds; round++) {
      const { lane, job, claimed } = await claimedJob(pool, project, worker, width, {
        maxAttempts: 2,
      });
      await pool.query(
        `update tasks set lease_expires_at = now() - interval '1 second' where job_id = $1`,
        [job.id],
      );
      // Even rounds: two sweeps and every completion inside their statements
      // at once, behind a gate on tasks. Odd rounds: random head starts.
      // Which side wins which task varies: only the invariants are asserted.
      const gated = round % 2 === 0;
      const jitter = (ms: number) => (gated ? Promise.resolve() : sleep(Math.random() * ms));
      const contenders = [
        () => sweep(racers, { lockTimeoutMs: 30_000 }),
        async () => {
          await jitter(3);
          return sweep(racers, { lockTimeoutMs: 30_000 });
        },
        ...claimed.map((task) => async () => {
          await jitter(12);
          return complete(racers, task);
        }),
      ];
      const settled = gated
        ? await gatedRace<unknown>(pool, racing, 'tasks', contenders)
        : await race<unknown>(contenders);
      const sweeps = fulfilled(settled.slice(0, 2), 'sweep') as SweepSummary[];
      assert.deepEqual(
        sweeps.map((s) => s.errors),
        [0, 0],
        'no repair failed',
      );
      const answers = settled.slice(2);
      const { rows } = await pool.query<{
        id: string;
        state: string;
        attempt: number;
        outcome: string | null;
        attempts: number;
      }>(
        `select t.id, t.state, t.attempt, a.outcome,
                (select count(*)::int from task_attempts x where x.task_id = t.id) as attempts
           from tasks t join task_attempts a on a.task_id = t.id and a.attempt = 1
          where t.job_id = $1`,
        [job.id],
      );
      const byId = new Map(rows.map((r) => [r.id, r]));
      let reports = sweeps.reduce((n, s) => n + s.jobs_settled, 0);
      claimed.forEach((task, i) => {
        const answer = answers[i]!;
        const row = byId.get(task.id)!;
        if (answer.status === 'fulfilled') {
          const result = answer.value as CompletionResult;
          assert.deepEqual(
            [result.state, row.state, row.outcome, row.attempts],
            ['success', 'success', 'success', 1],
            `task ${task.name}: the success was recorded and the sweep left it alone`,
          );
          if (result.job_state !== null) reports++;
          tally.won++;
        } else {
          assert.ok(
            answer.reason instanceof ConflictError,
            `task ${task.name}: a completion that lost answers 409, not ${describeError(answer.reason)}`,
          );
          assert.deepEqual(
            [row.state, row.attempt, row.outcome],
            ['queued', 1, 'lost'],
            `task ${task.name}: the sweep requeued it and the success was not recorded`,
          );
          tally.lost++;
        }
      });
      // Finish what the sweep requeued; the job then settles exactly once.
      const again: ClaimedTask[] = [];
      for (;;) {
        const task = await claimTask(pool, worker, [lane]);
        if (!task) break;
        again.push(task);
      }
      const finals = await Promise.all(again.map((t) => complete(racers, t)));
      reports += finals.filter((r) => r.job_state !== null).length;
      const { rows: jobRows } = await pool.query('select state from jobs where id = $1', [job.id]);
      assert.equal(jobRows[0].state, 'success');
      assert.equal(reports, 1, 'one completion or one sweep settled the job');
      const statuses = await finalStatuses(pool, [job.id]);
      assert.deepEqual(statuses.get(job.id), [
        { state: 'success', description: `${width} passed` },
      ]);
      await assertTransitions(pool, [job.id]);
    }
  });
  t.diagnostic(`sweep vs success completions: ${JSON.stringify(tally)}`);
});

// 5. Claimers polling while new jobs start and children are promoted under
// them, every claim completed at once with an output. No task is claimed
// twice, every claim carries its parents' outputs, every job settles once,
// and nothing is left queued while claimers still poll.
test('12 claimers polling while 30 diamond jobs start and promote: no double claim, right outputs, all settle once', async () => {
  const claimers = 12;
  const jobsTotal = 30;
  const project = await forgeProject(pool);
  const lane = newLane();
  const workers = await Promise.all(
    Array.from({ length: claimers }, () => makeWorker(pool, [lane])),
  );
  const diamond = [
    laneSpec(lane, 'a', { outputs: ['v'] }),
    laneSpec(lane, 'b', { needs: ['a'], outputs: ['v'] }),
    laneSpec(lane, 'c', { needs: ['a'], outputs: ['v'] }),
    laneSpec(lane, 'd', { needs: ['b', 'c'], outputs: ['v'] }),
    laneSpec(lane, 'e', { outputs: ['v'] }),
  ];
  const jobIds: string[] = [];
  const claims: ClaimedTask[] = [];
  const results: CompletionResult[] = [];
  let producing = true;
  // A stranded job keeps the claimers polling: fail then, not hang.
  const deadline = Date.now() + 60_000;

  const producer = await racePool(racing, 2);
  try {
    await withRacers(racing, claimers, async (racers) => {
      // The gate on tasks holds every claimer's first claim (and the first
      // job's tasks) until all claimers are inside the claim at once.
      const settled = await gatedRace<void>(
        pool,
        racing,
        'tasks',
        [
          async () => {
            try {
              for (let j = 0; j < jobsTotal; j++) {
                jobIds.push((await startedJob(producer, project, diamond)).id);
                await sleep(Math.random() * 6);
              }
            } finally {
              producing = false;
            }
          },
          ...workers.map((worker) => async () => {
            for (;;) {
              assert.ok(
                Date.now() < deadline,
                'the claimers still poll after 60 s: a job is stranded',
              );
              const task = await claimTask(racers, worker, [lane]);
              if (task) {
                claims.push(task);
                results.push(await complete(racers, task, 'success', { v: task.id }));
                continue;
              }
              if (!producing) {
                const { rows } = await racers.query<{ left: boolean }>(
                  `select exists (select 1 from jobs
                                 where id = any($1::uuid[]) and state = 'running') as left`,
                  [jobIds],
                );
                if (!rows[0]!.left) return;
              }
              await sleep(Math.random() * 2);
            }
          }),
        ],
        claimers,
      );
      fulfilled(settled, 'producer or claimer');
    });
  } finally {
    await producer.end();
  }

  assert.equal(jobIds.length, jobsTotal);
  assert.equal(claims.length, jobsTotal * diamond.length, 'every task claimed');
  assert.equal(new Set(claims.map((c) => c.id)).size, claims.length, 'no task claimed twice');
  const idOf = new Map(claims.map((c) => [`${c.job_id}/${c.name}`, c.id]));
  const wrong = claims.flatMap((c) => {
    const want = Object.fromEntries(
      diamond
        .find((s) => s.name === c.name)!
        .needs.map((n) => [n, { v: idOf.get(`${c.job_id}/${n}`)! }]),
    );
    try {
      assert.deepEqual(c.needs_outputs, want);
      return [];
    } catch {
      return [{ task: c.name, job: c.job_id, got: c.needs_outputs, want }];
    }
  });
  assert.deepEqual(wrong, [], "every claim carries its parents' outputs");
  const { rows } = await pool.query<{ state: string; n: number }>(
    `select t.state, count(*)::int as n from tasks t
      where t.job_id = any($1::uuid[]) and (t.state <> 'success' or t.attempt <> 1)
      group by t.state`,
    [jobIds],
  );
  assert.deepEqual(rows, [], 'every task succeeded on its first and only attempt');
  const statuses = await finalStatuses(pool, jobIds);
  for (const jobId of jobIds) {
    const reports = results.filter((r) => r.job_id === jobId && r.job_state !== null);
    assert.deepEqual(
      reports.map((r) => r.job_state),
      ['success'],
      `one report for ${jobId}`,
    );
    assert.deepEqual(statuses.get(jobId), [
      { state: 'success', description: `${diamond.length} passed` },
    ]);
  }
  await assertTransitions(pool, jobIds);
});

/** Runs `during` while a claim on a stalled connection waits between its two snapshots. */
async function withStalledClaim(
  worker: string,
  lane: string,
  during: () => Promise<void>,
): Promise<ClaimedTask | null> {
  const url = new URL(db.url);
  url.searchParams.set('options', '-c search_path=stall,public');
  const stalled = await racePool({ ...racing, url: url.toString() }, 1);
  const blocker = await pool.connect();
  try {
    await blocker.query('select pg_advisory_lock($1)', [STALL_KEY]);
    let claim: Promise<ClaimedTask | null> | undefined;
    try {
      claim = claimTask(stalled, worker, [lane]);
      await untilWaiting(pool, racing, 1);
      await during();
    } finally {
      await blocker.query('select pg_advisory_unlock($1)', [STALL_KEY]);
    }
    return await claim;
  } finally {
    blocker.release();
    await stalled.end();
  }
}

// 6. The snapshot gap of the claim. At READ COMMITTED the claim statement's
// snapshot was taken when it started and the statements inside
// conductor_claim read with newer ones; these tests ran there without
// meaning to: the stalled pool's URL carries `options`, which node-postgres
// let replace the pool's REPEATABLE READ until createPool merged them
// (docs/database.md, "The pool"). At REPEATABLE READ, the isolation every
// claim runs at, the whole call reads the snapshot its statement took: a
// child promoted during the stall is not seen by the stalled claim, and the
// next claim takes it with its parent's outputs (the first version, which
// read the outputs in the outer statement, handed it none).
test("a child promoted while a claim is stalled is left to the next claim, which gets its parent's outputs", async () => {
  const project = await forgeProject(pool);
  const worker = await makeWorker(pool);
  const lane = newLane();
  const job = await startedJob(pool, project, [
    laneSpec(lane, 'parent', { outputs: ['v'] }),
    laneSpec(lane, 'child', { needs: ['parent'] }),
  ]);
  const [parent] = await claimAll(pool, worker, lane, 1);
  const stalled = await withStalledClaim(worker, lane, async () => {
    const done = await complete(pool, parent!, 'success', { v: 'made by parent' });
    assert.equal(done.state, 'success');
    const { rows } = await pool.query(
      `select state from tasks where job_id = $1 and name = 'child'`,
      [job.id],
    );
    assert.equal(rows[0].state, 'queued', 'the follow-up promoted the child');
  });
  assert.equal(stalled, null, "the stalled claim's snapshot predates the promotion");
  const child = await claimTask(pool, worker, [lane]);
  assert.equal(child?.name, 'child');
  assert.deepEqual(
    child.needs_outputs,
    { parent: { v: 'made by parent' } },
    "the claim hands the child its parent's output",
  );
  await complete(pool, child);
  await assertTransitions(pool, [job.id]);
});

test('a job cancelled while a claim is between its snapshots is not claimed from', async () => {
  const project = await forgeProject(pool);
  const worker = await makeWorker(pool);
  const lane = newLane();
  const job = await startedJob(pool, project, [laneSpec(lane, 'only')]);
  const claimed = await withStalledClaim(worker, lane, async () => {
    await cancelJob(pool, job.id, 'while claiming');
  });
  assert.equal(claimed, null, 'nothing claimable once the cancel committed');
  const { rows } = await pool.query(
    `select t.state, (select count(*)::int from task_attempts a where a.task_id = t.id) as attempts
       from tasks t where t.job_id = $1`,
    [job.id],
  );
  assert.deepEqual(rows, [{ state: 'cancelled', attempts: 0 }]);
  await assertTransitions(pool, [job.id]);
});

// A task inserted after the claim statement's snapshot is not seen by that
// claim (REPEATABLE READ: the function's statements read the same snapshot);
// the next claim takes it, leased to the worker.
test('a job started while a claim is stalled is claimed by the next claim', async () => {
  const project = await forgeProject(pool);
  const worker = await makeWorker(pool);
  const lane = newLane();
  let jobId = '';
  const stalled = await withStalledClaim(worker, lane, async () => {
    jobId = (await startedJob(pool, project, [laneSpec(lane, 'fresh')])).id;
  });
  assert.equal(stalled, null, "the stalled claim's snapshot predates the job");
  const claimed = await claimTask(pool, worker, [lane]);
  const { rows } = await pool.query<{ id: string; state: string; attempt: number }>(
    'select id, state, attempt from tasks where job_id = $1',
    [jobId],
  );
  const task = rows[0]!;
  assert.equal(claimed?.id, task.id, 'the next claim takes the task started meanwhile');
  assert.deepEqual([task.state, task.attempt], ['running', 1]);
  await complete(pool, claimed);
  await assertTransitions(pool, [jobId]);
});

// 7. The worker check writes last_seen_at in the same statement: concurrent
// requests of one runner all authenticate, and a revoked token is refused.
test('32 concurrent checks of one worker token all pass and mark it seen; a revoked token is refused', async () => {
  const token = `cw_${randomBytes(16).toString('hex')}`;
  const { rows } = await pool.query<{ id: string }>(
    `insert into workers (name, token_hash, labels) values ('racer', $1, '{x}') returning id`,
    [hashToken(token)],
  );
  const id = rows[0]!.id;
  const event = { headers: { authorization: `Bearer ${token}` } } as unknown as HttpEvent;
  await withRacers(racing, 32, async (racers) => {
    for (const stale of [null, '5 minutes']) {
      await pool.query(
        `update workers set last_seen_at = case when $2::interval is null then null
                                                 else now() - $2::interval end where id = $1`,
        [id, stale],
      );
      const seen = fulfilled(
        await gatedRace(
          pool,
          racing,
          'workers',
          Array.from({ length: 32 }, () => () => requireWorker(racers, event)),
        ),
        'worker check',
      );
      assert.ok(seen.every((w) => w.id === id && w.labels[0] === 'x'));
      const { rows: after } = await pool.query(
        `select last_seen_at > now() - interval '10 seconds' as fresh from workers where id = $1`,
        [id],
      );
      assert.equal(after[0].fresh, true, 'the worker is marked seen');
    }
    await pool.query('update workers set revoked = true where id = $1', [id]);
    await assert.rejects(requireWorker(racers, event), UnauthorizedError);
  });
});
