// No work lost to a lost reply (issue #35): a claim whose reply never reaches
// the caller is given back by the lease id the caller chose, or, when the
// give-back cannot run either, is answered again to a repeat with the same
// Idempotency-Key; a claim answered 503 by the early timeout is given back; a
// takeover given back restarts the queue clock; a claim given back after its
// job's cancel ends cancelled; of a completion and its repeat, whichever
// follow-up settles the job reports it; and a success call (the success, its
// commit, the follow-up: issue #36) that fails after its commit loses nothing
// and records nothing twice. Each fault is made on purpose: the
// wire is cut by a TCP proxy right after the server answered, rows are held.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import test from 'node:test';
import { claimForToken } from '../../lib/app/claim.ts';
import { putSecret } from '../../lib/app/projects.ts';
import { createPool, isConnectionError, loadFunctionFiles } from '../../lib/db/index.ts';
import { UnavailableError } from '../../lib/errors.ts';
import { hashToken } from '../../lib/http/auth.ts';
import {
  cancelJob,
  claimTask,
  completeTask,
  releaseClaim,
  sweep,
} from '../../lib/scheduler/index.ts';
import { followUpAfterCommit } from '../../lib/scheduler/progress.ts';
import { generateKey, parseKeyring } from '../../lib/secrets.ts';
import { spec } from '../helpers/fixtures.ts';
import { holdRows, settle, sleep } from '../helpers/race.ts';
import { schedulerDatabase } from '../helpers/scheduler.ts';
import { startTcpProxy } from '../helpers/tcp-proxy.ts';

const db = await schedulerDatabase(import.meta.url);
const { pool } = db;
const keyring = parseKeyring(generateKey());
const proxy = await startTcpProxy(db.url);
test.after(() => proxy.close());

/** A pool whose connections go through the proxy; fresh, so each statement is parsed (its text on the wire). */
function proxied() {
  return createPool({ url: proxy.url(db.url), max: 2 });
}

let lanes = 0;
/** A project with a one-task job in a lane of its own, and a worker with a token. */
async function oneTask(over: Parameters<typeof spec>[1] = {}) {
  const lane = `lost-${++lanes}`;
  const project = await db.makeProject();
  for (const name of over.secrets ?? []) {
    await putSecret(pool, keyring, project, name, `${name}-value-${lane}`);
  }
  const job = await db.startedJob(project, [spec('t', { labels: [lane], ...over })]);
  const token = `cw_test_${randomBytes(8).toString('hex')}`;
  const { rows } = await pool.query<{ id: string }>(
    `insert into workers (name, token_hash, labels) values ('w', $1, $2) returning id`,
    [hashToken(token), [lane]],
  );
  const task = (await db.tasksOf(job.id)).t!;
  return { lane, project, job, task, worker: rows[0]!.id, tokenHash: hashToken(token) };
}

/** oneTask's task claimed by its worker, and that claim's success report. */
async function claimedSuccess() {
  const { worker, lane, job } = await oneTask();
  const claimed = (await claimTask(pool, worker, [lane]))!;
  const c = {
    workerId: worker,
    taskId: claimed.id,
    leaseId: claimed.lease_id!,
    outcome: 'success' as const,
  };
  return { job, claimed, c };
}

async function attemptsOf(taskId: string): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    'select count(*)::int as n from task_attempts where task_id = $1',
    [taskId],
  );
  return rows[0]!.n;
}

test('a repeated claim with the same Idempotency-Key is answered the same attempt; another key claims anew', async () => {
  const lane = `lost-${++lanes}`;
  const project = await db.makeProject();
  const job = await db.startedJob(project, [
    spec('a', { labels: [lane] }),
    spec('b', { labels: [lane] }),
  ]);
  const worker = await db.makeWorker([lane]);
  const first = await claimTask(pool, worker, [lane], { key: 'k-1' });
  const again = await claimTask(pool, worker, [lane], { key: 'k-1' });
  assert.ok(first && again);
  assert.equal(again.id, first.id);
  assert.equal(again.lease_id, first.lease_id);
  assert.equal(again.attempt, 1);
  const other = await claimTask(pool, worker, [lane], { key: 'k-2' });
  assert.equal(other?.name, 'b');
  const tasks = await db.tasksOf(job.id);
  assert.equal(await attemptsOf(tasks.a!.id), 1, 'the repeat started no attempt');

  // Another worker with the same key gets nothing of the first worker's.
  const stranger = await db.makeWorker([lane]);
  assert.equal(await claimTask(pool, stranger, [lane], { key: 'k-1' }), null);
  // Once the attempt ended, the key is an ordinary claim again.
  await db.finish(worker, first, 'success');
  assert.equal(await claimTask(pool, worker, [lane], { key: 'k-1' }), null);
});

test('a claim whose reply is lost after it committed is given back: the task is queued again and no attempt is counted', async () => {
  const { task, tokenHash, worker, lane } = await oneTask({ maxAttempts: 1 });
  const app = proxied();
  try {
    const cut = proxy.once('conductor_claim_by_token', 'lose-reply');
    const claim = await settle(claimForToken(app, keyring, tokenHash, undefined, 60, { key: 'x' }));
    await cut;
    assert.equal(claim.status, 'rejected');
    assert.ok(claim.status === 'rejected' && isConnectionError(claim.reason));
  } finally {
    await app.end();
  }
  const after = (await db.tasksOf(task.job_id)).t!;
  assert.equal(after.state, 'queued');
  assert.equal(after.attempt, 0);
  assert.equal(await attemptsOf(task.id), 0);
  // With one attempt, a burnt attempt would have failed the task: it runs.
  const next = await claimTask(pool, worker, [lane], { key: 'x' });
  assert.equal(next?.id, task.id);
  assert.equal(next?.attempt, 1);
});

test('a claim whose reply is lost and whose give-back cannot run is answered again to the repeat with the same key', async () => {
  const { task, tokenHash } = await oneTask({ maxAttempts: 1 });
  const app = proxied();
  let held: (() => Promise<void>) | null = null;
  try {
    // The server has committed the claim; before the caller hears the cut,
    // the task row is held, so the give-back waits and times out (5 s).
    const cut = proxy.once('conductor_claim_by_token', 'lose-reply', async () => {
      held = await holdRows(pool, 'tasks', [task.id]);
    });
    const claim = await settle(claimForToken(app, keyring, tokenHash, undefined, 60, { key: 'y' }));
    await cut;
    assert.equal(claim.status, 'rejected');
  } finally {
    await (held as (() => Promise<void>) | null)?.();
    await app.end();
  }
  const running = (await db.tasksOf(task.job_id)).t!;
  assert.equal(running.state, 'running', 'the give-back could not run');
  const repeat = await claimForToken(pool, keyring, tokenHash, undefined, 60, { key: 'y' });
  assert.equal(repeat.task?.id, task.id);
  assert.equal(repeat.task?.lease_id, running.lease_id, 'the same lease');
  assert.equal(repeat.task?.attempt, 1, 'the same attempt');
  assert.equal(await attemptsOf(task.id), 1);
});

// The give-back of a lost reply must not take back what a repeat with the
// same key has since answered (found in review): the runner holds that lease.
// The order is forced: the first claim's give-back waits on the task row the
// test holds while the repeat is answered, then runs.
test('a give-back that runs after the repeat with the same key was answered leaves the lease to the runner', async () => {
  const { task, tokenHash, worker } = await oneTask({ maxAttempts: 1 });
  await pool.query('update workers set ephemeral = true where id = $1', [worker]);
  const app = proxied();
  let held: (() => Promise<void>) | null = null;
  let first: Promise<PromiseSettledResult<unknown>> | null = null;
  try {
    const cut = proxy.once('conductor_claim_by_token', 'lose-reply', async () => {
      held = await holdRows(pool, 'tasks', [task.id]);
    });
    first = settle(claimForToken(app, keyring, tokenHash, undefined, 60, { key: 'k' }));
    await cut;
    await waitUntil(async () => (await rowLockWaiters()) >= 1);
    const repeat = await claimForToken(pool, keyring, tokenHash, undefined, 60, { key: 'k' });
    assert.ok(repeat.task, 'the repeat is answered the task');
    await (held as unknown as () => Promise<void>)();
    held = null;
    assert.equal((await first).status, 'rejected');
    const after = (await db.tasksOf(task.job_id)).t!;
    assert.equal(after.state, 'running');
    assert.equal(after.lease_id, repeat.task.lease_id, 'the lease the runner holds is live');
    const { rows } = await pool.query('select claimed_lease from workers where id = $1', [worker]);
    assert.equal(rows[0].claimed_lease, repeat.task.lease_id, 'the ephemeral token is still spent');
  } finally {
    await (held as (() => Promise<void>) | null)?.();
    await app.end();
  }
});

test('a claim answered 503 by the early timeout, repeated with its key before its give-back runs, stays with the runner', async () => {
  const { task, tokenHash } = await oneTask({ secrets: ['TOKEN'] });
  const lock = await pool.connect();
  const deadline = new AbortController();
  let first: Promise<PromiseSettledResult<unknown>>;
  let repeat: Promise<PromiseSettledResult<Awaited<ReturnType<typeof claimForToken>>>>;
  try {
    await lock.query('begin');
    await lock.query('lock table project_secrets in access exclusive mode');
    first = settle(
      claimForToken(pool, keyring, tokenHash, undefined, 60, {
        key: 'e',
        signal: deadline.signal,
      }),
    );
    await waitUntil(async () => (await db.tasksOf(task.job_id)).t!.state === 'running');
    deadline.abort();
    // The repeat's key check answers the attempt; its own read of the
    // secrets then waits behind the lock too.
    repeat = settle(claimForToken(pool, keyring, tokenHash, undefined, 60, { key: 'e' }));
    await waitUntil(async () => {
      const { rows } = await pool.query(
        'select repeated_at from task_attempts where task_id = $1',
        [task.id],
      );
      return rows[0]?.repeated_at != null;
    });
  } finally {
    await lock.query('rollback');
    lock.release();
  }
  const r1 = await first!;
  const r2 = await repeat!;
  assert.ok(r1.status === 'rejected' && r1.reason instanceof UnavailableError);
  assert.ok(r2.status === 'fulfilled' && r2.value.task, 'the repeat is answered the task');
  const after = (await db.tasksOf(task.job_id)).t!;
  assert.equal(after.state, 'running');
  assert.equal(after.lease_id, r2.value.task.lease_id);
  assert.equal(after.attempt, 1);
});

test('a claim answered 503 by the early timeout while its answer was assembled is given back', async () => {
  const { task, tokenHash, worker, lane } = await oneTask({ secrets: ['TOKEN'] });
  // The secrets' read waits behind a lock this test holds, after the claim
  // committed; the request's deadline passes meanwhile.
  const lock = await pool.connect();
  const deadline = new AbortController();
  let claim: Promise<PromiseSettledResult<unknown>>;
  try {
    await lock.query('begin');
    await lock.query('lock table project_secrets in access exclusive mode');
    claim = settle(
      claimForToken(pool, keyring, tokenHash, undefined, 60, { signal: deadline.signal }),
    );
    await waitUntil(async () => (await db.tasksOf(task.job_id)).t!.state === 'running');
    deadline.abort();
  } finally {
    await lock.query('rollback');
    lock.release();
  }
  const result = await claim!;
  assert.equal(result.status, 'rejected');
  assert.ok(result.status === 'rejected' && result.reason instanceof UnavailableError);
  const after = (await db.tasksOf(task.job_id)).t!;
  assert.equal(after.state, 'queued');
  assert.equal(after.attempt, 0);
  const next = await claimTask(pool, worker, [lane]);
  assert.equal(next?.attempt, 1);
});

test('a takeover given back restarts the queue clock: the queue timeout does not fail it at once', async () => {
  const { task, worker, lane } = await oneTask();
  const first = await claimTask(pool, worker, [lane]);
  assert.ok(first);
  // Queued two hours ago with an hour to wait; its lease has just expired.
  await pool.query(
    `update tasks set queued_at = now() - interval '2 hours', queue_timeout_s = 3600,
                      lease_expires_at = now() - interval '1 second'
      where id = $1`,
    [task.id],
  );
  const takeover = await claimTask(pool, worker, [lane]);
  assert.equal(takeover?.attempt, 2);
  const released = await releaseClaim(pool, takeover!.lease_id!, null);
  assert.deepEqual(released, { jobId: task.job_id, taskId: task.id, ended: false, failed: false });
  await sweep(pool);
  const after = (await db.tasksOf(task.job_id)).t!;
  assert.equal(after.state, 'queued', 'not failed by the queue timeout');
  assert.equal(after.attempt, 1, 'the lost attempt still counts; the given-back one does not');
});

test("a claim given back after its job's cancel was requested ends cancelled, and the job settles cancelled", async () => {
  const { task, job, worker, lane } = await oneTask();
  const claimed = await claimTask(pool, worker, [lane]);
  assert.ok(claimed);
  await cancelJob(pool, job.id);
  const released = await releaseClaim(pool, claimed.lease_id!, null);
  assert.equal(released?.ended, true);
  await followUpAfterCommit(pool, job.id, task.id);
  const after = (await db.tasksOf(job.id)).t!;
  assert.equal(after.state, 'cancelled');
  assert.equal(await db.jobState(job.id), 'cancelled');
  const { rows } = await pool.query('select outcome from task_attempts where task_id = $1', [
    task.id,
  ]);
  assert.deepEqual(rows, [{ outcome: 'cancelled' }]);
});

// The completion that settles the job reports it, so the caller posts the
// commit status. Forced both ways: the first completion's follow-up settles
// (the repeat answers null), or the first completion's reply is lost right
// after its outcome committed and before its follow-up, so the repeat's
// follow-up settles (and reports: before #35 neither answer did).
test('of a completion and its repeat, the first one settles the job and reports it; the repeat answers null', async () => {
  const { c } = await claimedSuccess();
  assert.equal((await completeTask(pool, c)).job_state, 'success');
  const repeat = await completeTask(pool, c);
  assert.deepEqual([repeat.state, repeat.job_state], ['success', null]);
});

test('a completion whose reply is lost after the success and its follow-up committed: the job is settled, and the repeat answers the same state', async () => {
  const { job, claimed, c } = await claimedSuccess();
  const app = proxied();
  try {
    // The success procedure's reply is dropped once all of its work
    // committed: the success, then the follow-up in its own transaction.
    const cut = proxy.once('conductor_finish_success', 'lose-reply', async () => {
      assert.equal(await db.jobState(job.id), 'success', 'the call settled the job');
    });
    const first = await settle(completeTask(app, c));
    await cut;
    assert.equal(first.status, 'rejected');
  } finally {
    await app.end();
  }
  const repeat = await completeTask(pool, c);
  assert.deepEqual([repeat.state, repeat.job_state], ['success', null]);
  assert.equal(await attemptsOf(claimed.id), 1);
});

test("a success call whose connection dies after its success committed, before its follow-up settled: the repeat's follow-up settles the job and reports it", async () => {
  const { job, claimed, c } = await claimedSuccess();
  // The job row is held, so the call's follow-up (its settle) waits on it
  // after the success committed; its backend is then terminated.
  const holder = await pool.connect();
  const app = createPool({ url: db.url, max: 2 });
  try {
    await holder.query('begin');
    await holder.query('select 1 from jobs where id = $1 for update', [job.id]);
    const first = settle(completeTask(app, c));
    await waitUntil(async () => (await rowLockWaiters()) === 1);
    const { rows } = await pool.query<{ state: string }>('select state from tasks where id = $1', [
      claimed.id,
    ]);
    assert.equal(rows[0]!.state, 'success', 'the success committed before the follow-up');
    await pool.query(
      `select pg_terminate_backend(pid) from pg_stat_activity
        where datname = current_database() and wait_event_type = 'Lock'`,
    );
    const outcome = await first;
    assert.equal(
      outcome.status,
      'rejected',
      "a lost connection is the caller's (a 503 on the route)",
    );
    assert.ok(isConnectionError((outcome as PromiseRejectedResult).reason));
    await holder.query('commit');
  } finally {
    holder.release();
    await app.end();
  }
  assert.equal(await db.jobState(job.id), 'running', 'the follow-up never finished');
  const repeat = await completeTask(pool, c);
  assert.deepEqual([repeat.state, repeat.job_state], ['success', 'success']);
  assert.equal(await db.jobState(job.id), 'success');
  assert.equal(await attemptsOf(claimed.id), 1);
});

test("a success call whose follow-up fails with an error that is not the database's unavailability takes the transaction path: the success stands once, and the sweep settles the job", async () => {
  const { job, claimed, c } = await claimedSuccess();
  // The follow-up fails, after the success committed, in the call and again
  // in the transaction path's follow-up; the file's definition comes back after.
  await pool.query(`create or replace function conductor_follow_up(
      p_job uuid, p_task uuid,
      out job_state text, out promote boolean, out fail_fast boolean, out conditional boolean)
    language plpgsql volatile as $$ begin raise exception 'follow-up broken'; end $$`);
  let answer: Awaited<ReturnType<typeof completeTask>>;
  try {
    answer = await completeTask(pool, c);
  } finally {
    await pool.query(loadFunctionFiles().find((f) => f.name === 'conductor_follow_up')!.sql);
  }
  assert.deepEqual([answer.state, answer.job_state], ['success', null]);
  assert.equal(await attemptsOf(claimed.id), 1);
  assert.equal(await db.jobState(job.id), 'running', 'no follow-up finished');
  await sweep(pool);
  assert.equal(await db.jobState(job.id), 'success');
});

async function waitUntil(check: () => Promise<boolean>): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if (await check()) return;
    await sleep(20);
  }
  throw new Error('the condition never held');
}

/** Backends of this database waiting for a row or table lock. */
async function rowLockWaiters(): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    `select count(*)::int as n from pg_stat_activity
      where datname = current_database() and wait_event_type = 'Lock'`,
  );
  return rows[0]!.n;
}
