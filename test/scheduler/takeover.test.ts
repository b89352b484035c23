// A lost runner's task: a claim takes over a running task whose lease has
// expired (issue #19), and the old runner, should it come back, is fenced
// out. Each side of the race between the takeover and the old runner's
// completion is forced: a deferred trigger holds one side at its commit,
// with its row lock, while the other runs.
import assert from 'node:assert/strict';
import test from 'node:test';
import pg from 'pg';
import { ConflictError } from '../../lib/errors.ts';
import { claimTask, completeTask, heartbeat, sweep } from '../../lib/scheduler/index.ts';
import { spec } from '../helpers/fixtures.ts';
import { schedulerDatabase } from '../helpers/scheduler.ts';

const db = await schedulerDatabase(import.meta.url);
const { pool } = db;

let lanes = 0;
/** A job of one task in a lane of its own, claimed by `old` and left to expire. */
async function expiredTask(opts: { maxAttempts?: number; timeoutS?: number } = {}) {
  const lane = `takeover-${++lanes}`;
  const project = await db.makeProject();
  const old = await db.makeWorker([lane]);
  const fresh = await db.makeWorker([lane]);
  const job = await db.startedJob(project, [
    spec('t', {
      labels: [lane],
      maxAttempts: opts.maxAttempts ?? 3,
      timeoutS: opts.timeoutS ?? 3600,
    }),
  ]);
  const claimed = await claimTask(pool, old, [lane]);
  assert.ok(claimed);
  await pool.query(
    `update tasks set lease_expires_at = now() - interval '1 second' where id = $1`,
    [claimed.id],
  );
  return { lane, old, fresh, job, claimed };
}

async function attempts(taskId: string) {
  const { rows } = await pool.query(
    `select attempt, outcome, result_state, transient, finished_at is not null as finished
       from task_attempts where task_id = $1 order by attempt`,
    [taskId],
  );
  return rows;
}

test('a claim takes over a running task whose lease expired: the lost attempt is counted and the old runner is fenced out', async () => {
  const { lane, old, fresh, claimed } = await expiredTask();
  const again = await claimTask(pool, fresh, [lane]);
  assert.ok(again, 'the expired task is claimable');
  assert.equal(again.id, claimed.id);
  assert.equal(again.attempt, 2);
  assert.notEqual(again.lease_id, claimed.lease_id);
  assert.deepEqual(await attempts(claimed.id), [
    { attempt: 1, outcome: 'lost', result_state: 'queued', transient: true, finished: true },
    { attempt: 2, outcome: null, result_state: null, transient: null, finished: false },
  ]);

  await assert.rejects(heartbeat(pool, old, claimed.id, claimed.lease_id!), ConflictError);
  await assert.rejects(
    completeTask(pool, {
      workerId: old,
      taskId: claimed.id,
      leaseId: claimed.lease_id!,
      outcome: 'success',
    }),
    ConflictError,
  );
  const done = await completeTask(pool, {
    workerId: fresh,
    taskId: again.id,
    leaseId: again.lease_id!,
    outcome: 'success',
  });
  assert.deepEqual([done.state, done.job_state], ['success', 'success']);
});

test('an expired task goes before queued work, and a live lease is never taken', async () => {
  const { lane, fresh, claimed } = await expiredTask();
  const project = await db.makeProject();
  await db.startedJob(project, [spec('queued', { labels: [lane] })]);
  const first = await claimTask(pool, fresh, [lane]);
  assert.equal(first?.id, claimed.id, 'the lost task first');
  const second = await claimTask(pool, fresh, [lane]);
  assert.equal(second?.name, 'queued');
  assert.equal(await claimTask(pool, fresh, [lane]), null, 'the live leases stay where they are');
});

test('an expired task with no attempts left, cancelled, or past its timeout is left to the sweep', async () => {
  const spent = await expiredTask({ maxAttempts: 1 });
  assert.equal(await claimTask(pool, spent.fresh, [spent.lane]), null);
  const summary = await sweep(pool);
  assert.ok(summary.leases_expired >= 1);
  assert.equal((await db.tasksOf(spent.job.id)).t!.state, 'failed');

  const cancelled = await expiredTask();
  await pool.query('update tasks set cancel_requested = true where id = $1', [
    cancelled.claimed.id,
  ]);
  assert.equal(await claimTask(pool, cancelled.fresh, [cancelled.lane]), null);

  const late = await expiredTask({ timeoutS: 1 });
  await pool.query(
    `update task_attempts set started_at = now() - interval '1 minute' where task_id = $1`,
    [late.claimed.id],
  );
  assert.equal(await claimTask(pool, late.fresh, [late.lane]), null);
  await sweep(pool);
  const { t } = await db.tasksOf(late.job.id);
  assert.equal(t!.state, 'failed');
  assert.match(t!.error ?? '', /timed out/);
});

/** Holds the commit of whichever transaction writes a matching row until released. */
async function commitGate(table: 'tasks' | 'task_attempts', when: string) {
  const name = `gate_${table}`;
  await pool.query(`
    create or replace function ${name}() returns trigger language plpgsql as $$
    begin
      perform pg_advisory_xact_lock(7171);
      return null;
    end $$;
    create constraint trigger ${name} after insert or update on ${table}
      deferrable initially deferred for each row when (${when}) execute function ${name}();`);
  const holder = new pg.Client({ connectionString: db.url });
  await holder.connect();
  await holder.query('select pg_advisory_lock(7171)');
  return {
    async waitHeld() {
      for (let i = 0; i < 500; i++) {
        const { rows } = await pool.query(
          `select 1 from pg_stat_activity
            where datname = current_database() and wait_event_type = 'Lock' and wait_event = 'advisory'`,
        );
        if (rows.length > 0) return;
        await new Promise((r) => setTimeout(r, 10));
      }
      throw new Error('nothing reached the gate');
    },
    async open() {
      await holder.end();
      await pool.query(`drop trigger ${name} on ${table}; drop function ${name}()`);
    },
  };
}

test('takeover against the old runner completing, the takeover first: the completion is fenced out (409)', async () => {
  const { lane, old, fresh, job, claimed } = await expiredTask();
  // The takeover is held at its commit, holding the task's row lock.
  const gate = await commitGate('task_attempts', 'new.attempt = 2');
  const takeover = claimTask(pool, fresh, [lane]);
  await gate.waitHeld();
  // Its answer is kept as it comes, to be checked once the takeover is in.
  const late = completeTask(pool, {
    workerId: old,
    taskId: claimed.id,
    leaseId: claimed.lease_id!,
    outcome: 'success',
  }).then(
    (answer) => answer,
    (err: unknown) => err,
  );
  // The completion waits for the row the takeover holds.
  for (let i = 0; ; i++) {
    const { rows } = await pool.query(
      `select 1 from pg_stat_activity
        where datname = current_database() and wait_event_type = 'Lock' and wait_event <> 'advisory'`,
    );
    if (rows.length > 0) break;
    if (i > 500) throw new Error('the completion never waited for the row');
    await new Promise((r) => setTimeout(r, 10));
  }
  await gate.open();
  const won = await takeover;
  assert.equal(won?.attempt, 2);
  assert.ok((await late) instanceof ConflictError, 'the old runner hears 409');
  const { t } = await db.tasksOf(job.id);
  assert.deepEqual([t!.state, t!.attempt, t!.lease_id], ['running', 2, won!.lease_id]);
  assert.equal((await attempts(claimed.id)).length, 2);
});

test('takeover against the old runner completing, the completion first: the task succeeds once and nothing is claimed', async () => {
  const { lane, old, fresh, job, claimed } = await expiredTask();
  // The completion is held at its commit, holding the task's row lock.
  const gate = await commitGate('tasks', "new.state = 'success'");
  const done = completeTask(pool, {
    workerId: old,
    taskId: claimed.id,
    leaseId: claimed.lease_id!,
    outcome: 'success',
  });
  await gate.waitHeld();
  // SKIP LOCKED: the claim passes over the row the completion holds.
  assert.equal(await claimTask(pool, fresh, [lane]), null);
  await gate.open();
  const result = await done;
  assert.deepEqual([result.state, result.job_state], ['success', 'success']);
  assert.equal(await claimTask(pool, fresh, [lane]), null, 'a finished task is not taken over');
  const { t } = await db.tasksOf(job.id);
  assert.deepEqual([t!.state, t!.attempt], ['success', 1]);
  assert.deepEqual(
    (await attempts(claimed.id)).map((a) => a.outcome),
    ['success'],
  );
});

test('a heartbeat that renews an expired lease before a claim keeps the task', async () => {
  const { lane, old, fresh, claimed } = await expiredTask();
  // Late, but the lease is still its own: nothing took the task over yet.
  const beat = await heartbeat(pool, old, claimed.id, claimed.lease_id!);
  assert.ok(beat.lease_expires_at.getTime() > Date.now());
  assert.equal(await claimTask(pool, fresh, [lane]), null);
});
