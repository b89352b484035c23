// Claims that cannot cross projects (issue #28): a worker scoped to projects
// never claims another project's task, in the queue or by taking over an
// expired lease; an ephemeral worker's token is good for one claim, also when
// two claims of it race (each side of that race forced in turn).
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import test from 'node:test';
import { claimForToken } from '../../lib/app/claim.ts';
import { requireWorkerByHash } from '../../lib/app/workers.ts';
import { UnauthorizedError } from '../../lib/errors.ts';
import { hashToken } from '../../lib/http/auth.ts';
import { claimTask, completeSuccessByToken, completeTask } from '../../lib/scheduler/index.ts';
import { generateKey, parseKeyring } from '../../lib/secrets.ts';
import { spec } from '../helpers/fixtures.ts';
import { holdRows, settle, sleep } from '../helpers/race.ts';
import { schedulerDatabase } from '../helpers/scheduler.ts';

const db = await schedulerDatabase(import.meta.url);
const { pool } = db;
const keyring = parseKeyring(generateKey());

/** A worker with a token, scoped to `projects` (null: every project). */
async function worker(
  labels: string[],
  opts: { projects?: string[] | null; ephemeral?: boolean } = {},
): Promise<{ id: string; tokenHash: Buffer }> {
  const token = `cw_test_${randomBytes(8).toString('hex')}`;
  const { rows } = await pool.query<{ id: string }>(
    `insert into workers (name, token_hash, labels, projects, ephemeral)
     values ('w', $1, $2, $3, $4) returning id`,
    [hashToken(token), labels, opts.projects ?? null, opts.ephemeral ?? false],
  );
  return { id: rows[0]!.id, tokenHash: hashToken(token) };
}

let lanes = 0;
const newLane = () => `scope-${++lanes}`;

test("a worker scoped to a project never claims another project's queued task, though that task is older", async () => {
  const lane = newLane();
  const low = await db.makeProject();
  const high = await db.makeProject();
  const highJob = await db.startedJob(high, [spec('deploy', { labels: [lane] })]);
  const lowJob = await db.startedJob(low, [spec('build', { labels: [lane] })]);
  const scoped = await worker([lane], { projects: [low] });

  const first = await claimTask(pool, scoped.id, [lane]);
  assert.equal(first?.job_id, lowJob.id, "the scoped worker gets its own project's task");
  assert.equal(await claimTask(pool, scoped.id, [lane]), null, "never the other project's");
  assert.equal((await db.tasksOf(highJob.id)).deploy!.state, 'queued');

  const everyProject = await worker([lane]);
  assert.equal((await claimTask(pool, everyProject.id, [lane]))?.job_id, highJob.id);
});

test("a scoped worker does not take over another project's expired lease; a worker of that project does", async () => {
  const lane = newLane();
  const mine = await db.makeProject();
  const theirs = await db.makeProject();
  const theirJob = await db.startedJob(theirs, [spec('deploy', { labels: [lane] })]);
  const owner = await worker([lane], { projects: [theirs] });
  const claimed = await claimTask(pool, owner.id, [lane]);
  assert.equal(claimed?.job_id, theirJob.id);
  await pool.query(
    `update tasks set lease_expires_at = now() - interval '1 second' where id = $1`,
    [claimed!.id],
  );

  const outsider = await worker([lane], { projects: [mine] });
  assert.equal(await claimTask(pool, outsider.id, [lane]), null);
  const { deploy } = await db.tasksOf(theirJob.id);
  assert.equal(deploy!.lease_id, claimed!.lease_id, 'the lease is where it was');

  const colleague = await worker([lane], { projects: [theirs, mine] });
  const taken = await claimTask(pool, colleague.id, [lane]);
  assert.equal(taken?.id, claimed!.id);
  assert.equal(taken?.attempt, 2);
});

test('through the token: a scoped worker is answered "nothing claimable" while only other projects have work', async () => {
  const lane = newLane();
  const a = await db.makeProject();
  const b = await db.makeProject();
  await db.startedJob(b, [spec('secret-work', { labels: [lane], secrets: [] })]);
  const scoped = await worker([lane], { projects: [a] });
  const answer = await claimForToken(pool, keyring, scoped.tokenHash, undefined, 60);
  assert.equal(answer.task, null);
});

test("an ephemeral worker's token claims once; a second claim answers 401, and the token stops when the attempt ends", async () => {
  const lane = newLane();
  const project = await db.makeProject();
  const job = await db.startedJob(project, [
    spec('one', { labels: [lane] }),
    spec('two', { labels: [lane] }),
  ]);
  const eph = await worker([lane], { ephemeral: true });
  const first = await claimForToken(pool, keyring, eph.tokenHash, undefined, 60);
  assert.equal(first.task?.name, 'one');
  assert.equal(first.ephemeral, true);
  await assert.rejects(
    claimForToken(pool, keyring, eph.tokenHash, undefined, 60),
    (err: unknown) => err instanceof UnauthorizedError && /one claim/.test(err.message),
  );
  // While the attempt runs the token works for it (heartbeat, logs, complete).
  assert.equal((await requireWorkerByHash(pool, eph.tokenHash)).id, eph.id);
  await completeTask(pool, {
    workerId: eph.id,
    taskId: first.task!.id,
    leaseId: first.task!.lease_id,
    outcome: 'success',
  });
  await assert.rejects(requireWorkerByHash(pool, eph.tokenHash), UnauthorizedError);
  await assert.rejects(
    claimForToken(pool, keyring, eph.tokenHash, undefined, 60),
    UnauthorizedError,
  );
  assert.equal((await db.tasksOf(job.id)).two!.state, 'queued', 'the second task is untouched');
});

test("an ephemeral worker's completion repeated after its attempt ended (its reply was lost) is answered as a repeat, not a 401", async () => {
  const lane = newLane();
  const project = await db.makeProject();
  await db.startedJob(project, [spec('one', { labels: [lane] })]);
  const eph = await worker([lane], { ephemeral: true });
  const { task } = await claimForToken(pool, keyring, eph.tokenHash, undefined, 60);
  const c = { taskId: task!.id, leaseId: task!.lease_id };
  const first = await completeSuccessByToken(pool, eph.tokenHash, c);
  assert.equal(first.result?.state, 'success');
  const again = await completeSuccessByToken(pool, eph.tokenHash, c);
  assert.equal(again.workerId, eph.id, 'the token still passes for its own lease');
  const repeated = await completeTask(pool, {
    workerId: eph.id,
    taskId: c.taskId,
    leaseId: c.leaseId,
    outcome: 'success',
  });
  assert.equal(repeated.state, 'success');
  // For anything else the spent token is refused.
  await assert.rejects(requireWorkerByHash(pool, eph.tokenHash), UnauthorizedError);
  await assert.rejects(
    requireWorkerByHash(pool, eph.tokenHash, '00000000-0000-4000-8000-000000000000'),
    UnauthorizedError,
  );
});

// Two claims of one ephemeral token at once: both find a task, and both wait
// to mark the worker's one claim behind a lock the test holds on the worker
// row. The lock queue lets the first waiter go first, so the claim started
// first wins; which task it wins is forced by holding task a's row while it
// picks (SKIP LOCKED passes a over, so it takes b and the second claim takes
// a). Each outcome runs.
for (const wins of ['a', 'b'] as const) {
  test(`two claims of one ephemeral token at once: only the first to mark the worker claims (task ${wins}), the other answers 401 and its task stays queued with no attempt counted`, async () => {
    const lane = newLane();
    const project = await db.makeProject();
    const job = await db.startedJob(project, [
      spec('a', { labels: [lane] }),
      spec('b', { labels: [lane] }),
    ]);
    const eph = await worker([lane], { ephemeral: true });
    const before = await db.tasksOf(job.id);
    const release = await holdWorkerRow(eph.id);
    const releaseA = wins === 'b' ? await holdRows(pool, 'tasks', [before.a!.id]) : null;
    const claims: Array<Promise<PromiseSettledResult<Awaited<ReturnType<typeof claimForToken>>>>> =
      [];
    try {
      claims.push(settle(claimForToken(pool, keyring, eph.tokenHash, undefined, 60)));
      await waitersOnWorkers(1);
      await releaseA?.();
      claims.push(settle(claimForToken(pool, keyring, eph.tokenHash, undefined, 60)));
      await waitersOnWorkers(2);
    } finally {
      await releaseA?.();
      await release();
    }
    const [first, second] = await Promise.all(claims);
    assert.equal(first!.status, 'fulfilled');
    assert.equal(first!.status === 'fulfilled' && first!.value.task?.name, wins);
    assert.equal(second!.status, 'rejected');
    assert.ok(second!.status === 'rejected' && second!.reason instanceof UnauthorizedError);
    const tasks = await db.tasksOf(job.id);
    const other = wins === 'a' ? tasks.b! : tasks.a!;
    assert.equal(tasks[wins]!.state, 'running');
    assert.equal(other.state, 'queued');
    assert.equal(other.attempt, 0, 'the losing claim counted no attempt');
  });
}

async function holdWorkerRow(id: string) {
  const client = await pool.connect();
  await client.query('begin');
  await client.query('select 1 from workers where id = $1 for update', [id]);
  return async () => {
    await client.query('rollback');
    client.release();
  };
}

// The claim statement as pg_stat_activity shows it: its text is cut at
// track_activity_query_size (1 kB), before the call of conductor_claim.
async function waitersOnWorkers(n: number): Promise<void> {
  for (let i = 0; i < 500; i++) {
    const { rows } = await pool.query<{ n: number }>(
      `select count(*)::int as n from pg_stat_activity
        where datname = current_database() and wait_event_type = 'Lock'
          and query like '%worker as (%'`,
    );
    if (rows[0]!.n >= n) return;
    await sleep(20);
  }
  throw new Error(`fewer than ${n} claims waited for the worker row`);
}
