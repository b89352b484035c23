// The failure classes of the seed documents, each forced on purpose: a
// follow-up that finishes tasks and settles before it commits, a claim that
// commits and then cannot be assembled, a sweep that dies between marking a
// compile and dispatching it, a sweep out of time, and isolation that must not
// depend on the server's default.
import assert from 'node:assert/strict';
import test from 'node:test';
import pg from 'pg';
import { claimForToken } from '../../lib/app/claim.ts';
import { putSecret } from '../../lib/app/projects.ts';
import { SESSION_OPTIONS } from '../../lib/db/index.ts';
import { hashToken } from '../../lib/http/auth.ts';
import { claimTask, completeTask, sweep } from '../../lib/scheduler/index.ts';
import { generateKey, parseKeyring } from '../../lib/secrets.ts';
import { spec } from '../helpers/fixtures.ts';
import { schedulerDatabase } from '../helpers/scheduler.ts';

const db = await schedulerDatabase(import.meta.url);
const { pool } = db;

/** Resolves once some backend of this database waits for a lock of this kind. */
async function waitForLockWait(kind: 'advisory' | 'relation' | 'tuple' | 'transactionid') {
  for (let i = 0; i < 500; i++) {
    const { rows } = await pool.query(
      `select 1 from pg_stat_activity
        where datname = current_database() and wait_event_type = 'Lock' and wait_event = $1`,
      [kind],
    );
    if (rows.length > 0) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`no backend started waiting for a ${kind} lock`);
}

/** A second connection that holds a lock until `release` is called. */
async function holder() {
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  return {
    query: (sql: string, values?: unknown[]) => client.query(sql, values),
    async release() {
      await client.end();
    },
  };
}

// Guards the seed-003 class: the follow-up failed a child for a missing
// output and settled in the same, uncommitted transaction. A sibling whose
// outcome committed meanwhile still saw that child waiting, so neither
// settled and the job stayed running until the sweep.
test('a follow-up that fails a child settles the job after it commits, though a sibling finished meanwhile', async () => {
  const { worker, job } = await db.runningJob([
    spec('q', { outputs: ['v'] }),
    spec('c', { needs: ['q'] }),
    spec('p'),
  ]);
  const q = await db.claimNamed(worker, 'q');
  const p = await db.claimNamed(worker, 'p');

  // Q's follow-up is held at its commit: a deferred trigger on the failed
  // child waits for an advisory lock this test holds. Everything the
  // follow-up does before its commit has run by then.
  await pool.query(`
    create function gate_commit() returns trigger language plpgsql as $$
    begin
      perform pg_advisory_xact_lock(4242);
      return null;
    end $$;
    create constraint trigger gate_c after update on tasks deferrable initially deferred
      for each row when (new.name = 'c' and new.state = 'failed') execute function gate_commit();`);
  const gate = await holder();
  try {
    await gate.query('select pg_advisory_lock(4242)');
    const qDone = completeTask(pool, {
      workerId: worker,
      taskId: q.id,
      leaseId: q.lease_id!,
      outcome: 'success',
    });
    await waitForLockWait('advisory');

    // P finishes while Q's follow-up is uncommitted: P sees C still waiting.
    const pDone = await db.finish(worker, p, 'success');
    assert.equal(pDone.job_state, null, 'P cannot settle: C looks waiting to it');
    assert.equal(await db.jobState(job.id), 'running');

    await gate.query('select pg_advisory_unlock(4242)');
    const qResult = await qDone;
    assert.equal(
      qResult.job_state,
      'failed',
      "Q's completion settles the job once C's failure committed",
    );
  } finally {
    await gate.release();
    await pool.query('drop trigger gate_c on tasks; drop function gate_commit()');
  }
  assert.equal(await db.jobState(job.id), 'failed');
  const tasks = await db.tasksOf(job.id);
  assert.equal(tasks.c!.state, 'failed');
  assert.match(tasks.c!.error ?? '', /output "v" of "q"/);
  const { rows } = await pool.query(
    `select state from status_outbox where job_id = $1 and state in ('success', 'failure')`,
    [job.id],
  );
  assert.ok(rows.length <= 1, 'settled at most once');
});

async function projectWithSecretTask() {
  const keyring = parseKeyring(generateKey());
  const project = await db.makeProject();
  await putSecret(pool, keyring, project, 'DEPLOY_KEY', 'hunter2-hunter2');
  // Its own label, so no task another test left queued is claimed instead.
  const lane = `secret-${project}`;
  const worker = await db.makeWorker([lane]);
  const job = await db.startedJob(project, [
    spec('deploy', { secrets: ['DEPLOY_KEY'], labels: [lane] }),
  ]);
  const token = `cw_test_${job.id}`;
  await pool.query('update workers set token_hash = $2 where id = $1', [worker, hashToken(token)]);
  return { keyring, project, worker, job, tokenHash: hashToken(token) };
}

// Guards the seed-000 class: the claim committed the attempt and the lease,
// then failed to open a secret and answered 500. The task stayed running
// under a lease no runner held, and failed later as "the runner stopped
// reporting".
test('a claim whose secret cannot be opened fails the task naming the secret, and the job settles', async () => {
  const { job, tokenHash } = await projectWithSecretTask();
  const otherKeys = parseKeyring(generateKey());
  const answer = await claimForToken(pool, otherKeys, tokenHash, undefined, 60);
  assert.equal(answer.task, null, 'the runner hears "nothing claimable"');
  const { deploy } = await db.tasksOf(job.id);
  assert.equal(deploy!.state, 'failed');
  assert.equal(deploy!.error, 'secret DEPLOY_KEY cannot be opened with the configured keys');
  assert.equal(deploy!.lease_expires_at, null);
  assert.equal(await db.jobState(job.id), 'failed');
});

test('a claim whose secrets cannot be read goes back to the queue without counting the attempt', async () => {
  const { keyring, job, tokenHash } = await projectWithSecretTask();
  // The secrets' read waits for a lock this test holds and gives up after
  // 300 ms: the claim has committed by then.
  const impatient = new pg.Pool({
    connectionString: db.url,
    options: `${SESSION_OPTIONS} -c lock_timeout=300`,
    max: 2,
  });
  const lock = await holder();
  try {
    await lock.query('begin');
    await lock.query('lock table project_secrets in access exclusive mode');
    await assert.rejects(claimForToken(impatient, keyring, tokenHash, undefined, 60), {
      code: '55P03',
    });
    await lock.query('rollback');
  } finally {
    await lock.release();
    await impatient.end();
  }
  const { deploy } = await db.tasksOf(job.id);
  assert.equal(deploy!.state, 'queued');
  assert.equal(deploy!.attempt, 0, 'the attempt that never reached a runner is not counted');
  const { rows } = await pool.query(
    'select count(*)::int as n from task_attempts where task_id = $1',
    [deploy!.id],
  );
  assert.equal(rows[0].n, 0);

  const again = (await claimForToken(pool, keyring, tokenHash, undefined, 60)).task;
  assert.ok(again);
  assert.equal(again.id, deploy!.id);
  assert.equal(again.attempt, 1);
  assert.deepEqual(again.secrets, { DEPLOY_KEY: 'hunter2-hunter2' });
});

// Guards the sweep committing what it had not done: it counted a compile
// attempt, and dispatched only after the whole sweep returned. Five sweeps
// that died in between failed a job that was never compiled.
test('a sweep that dies between marking a compile and dispatching it burns no attempt', async () => {
  const project = await db.makeProject();
  const { job } = await db.pendingJob(project, { ref: 'refs/heads/dies' });
  const dies = async () => {
    throw new Error('the sweep was killed before its dispatch');
  };
  for (let i = 0; i < 7; i++) {
    const summary = await sweep(pool, { compileStaleS: 0, maxCompileAttempts: 3, dispatch: dies });
    assert.deepEqual(summary.dispatch, [job.id]);
    assert.equal(summary.compiles_failed, 0);
  }
  const { rows } = await pool.query('select state, compile_attempts from jobs where id = $1', [
    job.id,
  ]);
  assert.deepEqual(rows[0], { state: 'pending', compile_attempts: 0 });
});

test('a sweep whose deadline passes starts no new repair, says what it left, and the next sweep does it', async () => {
  const { worker, job } = await db.runningJob([spec('a'), spec('b')]);
  const a = await db.claimNamed(worker, 'a');
  const b = await db.claimNamed(worker, 'b');
  await pool.query(
    `update tasks set lease_expires_at = now() - case when id = $1 then interval '2 minutes'
                                                       else interval '1 minute' end
      where id = any($2::uuid[])`,
    [a.id, [a.id, b.id]],
  );
  // A's repair (the oldest lease, first) waits for a row lock this test
  // holds; while it waits, the deadline passes (set then, by the test), and
  // only then is the lock let go: A's repair, started in time, finishes, and
  // B's, not started, is left. Nothing here depends on how fast the sweep is.
  const lock = await holder();
  const opts = { deadline: Number.MAX_SAFE_INTEGER, lockTimeoutMs: 60_000 };
  let first: Awaited<ReturnType<typeof sweep>>;
  try {
    await lock.query('begin');
    await lock.query('select 1 from tasks where id = $1 for update', [a.id]);
    const sweeping = sweep(pool, opts);
    await waitForLockWait('transactionid');
    opts.deadline = Date.now();
    await lock.query('rollback');
    first = await sweeping;
  } finally {
    await lock.release();
  }
  assert.equal(first.errors, 0);
  assert.equal(first.leases_expired, 1, "A's repair, started before the deadline, was done");
  assert.equal(first.deferred, 1, 'B was left for the next sweep');
  assert.deepEqual(first.skipped, [
    'queue timeouts',
    'block timeouts',
    'follow-ups',
    'orphans',
    'compiles',
  ]);
  assert.equal((await db.tasksOf(job.id)).b!.state, 'running', 'nothing was done to B');

  const next = await sweep(pool);
  assert.equal(next.leases_expired, 1);
  assert.deepEqual(next.skipped, []);
  const tasks = await db.tasksOf(job.id);
  assert.deepEqual([tasks.a!.state, tasks.b!.state], ['queued', 'queued']);
  for (const name of ['a', 'b'])
    await db.finish(worker, await db.claimNamed(worker, name), 'success');
  assert.equal(await db.jobState(job.id), 'success');
});

for (const serverDefault of ['read committed', 'repeatable read', 'serializable']) {
  test(`claims and outcomes run at REPEATABLE READ when the database's default is ${serverDefault}`, async () => {
    await pool.query(
      `alter database ${db.name} set default_transaction_isolation = '${serverDefault}'`,
    );
    const fresh = new pg.Pool({ connectionString: db.url, max: 1 });
    const app = new pg.Pool({ connectionString: db.url, options: SESSION_OPTIONS, max: 4 });
    try {
      const server = await fresh.query('show transaction_isolation');
      assert.equal(server.rows[0].transaction_isolation, serverDefault, 'the default took');
      const ours = await app.query('show transaction_isolation');
      assert.equal(ours.rows[0].transaction_isolation, 'repeatable read');

      const lane = [`iso-${serverDefault.replace(' ', '-')}`];
      const { worker, job } = await db.runningJob([
        spec('one', { labels: lane }),
        spec('two', { needs: ['one'], labels: lane }),
      ]);
      const one = await claimTask(app, worker, lane);
      assert.equal(one?.name, 'one');
      const first = await completeTask(app, {
        workerId: worker,
        taskId: one.id,
        leaseId: one.lease_id!,
        outcome: 'success',
      });
      assert.equal(first.state, 'success');
      const two = await claimTask(app, worker, lane);
      assert.equal(two?.name, 'two');
      const last = await completeTask(app, {
        workerId: worker,
        taskId: two.id,
        leaseId: two.lease_id!,
        outcome: 'success',
      });
      assert.deepEqual([last.state, last.job_state], ['success', 'success']);
      assert.equal(await db.jobState(job.id), 'success');
    } finally {
      await fresh.end();
      await app.end();
      await pool.query(`alter database ${db.name} reset default_transaction_isolation`);
    }
  });
}
