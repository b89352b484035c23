import assert from 'node:assert/strict';
import { beforeEach, test } from 'node:test';
import { createPool } from '../../lib/db/index.ts';
import { ConflictError, NotFoundError } from '../../lib/errors.ts';
import {
  cancelJob,
  cancelPullRequest,
  claimTask,
  createJob,
  heartbeat,
  rerunJob,
} from '../../lib/scheduler/index.ts';
import { sha, spec } from '../helpers/fixtures.ts';
import { schedulerDatabase } from '../helpers/scheduler.ts';

const db = await schedulerDatabase(import.meta.filename);
const { pool } = db;

// Tests share one database; cancel what a test left unfinished so the next
// one's claims only see its own tasks.
beforeEach(async () => {
  const { rows } = await pool.query(`select id from jobs where state in ('pending', 'running')`);
  for (const row of rows) await cancelJob(pool, row.id);
  await pool.query(
    `update tasks set state = 'cancelled', finished_at = now() where state = 'running'`,
  );
});

test('a transient failure is queued again until its attempts run out, then fails', async () => {
  const { worker, job } = await db.runningJob([spec('flaky', { maxAttempts: 3 })]);
  for (const attempt of [1, 2]) {
    const t = await db.claimNamed(worker, 'flaky');
    assert.equal(t.attempt, attempt);
    const r = await db.finish(worker, t, 'failed', { transient: true, error: 'clone failed' });
    assert.deepEqual([r.state, r.job_state], ['queued', null]);
  }
  const t = await db.claimNamed(worker, 'flaky');
  assert.equal(t.attempt, 3);
  const r = await db.finish(worker, t, 'failed', { transient: true, error: 'clone failed' });
  assert.deepEqual([r.state, r.job_state], ['failed', 'failed']);
  const { rows } = await pool.query(
    'select attempt, outcome, transient, result_state from task_attempts where task_id = $1 order by attempt',
    [t.id],
  );
  assert.deepEqual(
    rows.map((a) => [a.attempt, a.outcome, a.transient, a.result_state]),
    [
      [1, 'failed', true, 'queued'],
      [2, 'failed', true, 'queued'],
      [3, 'failed', true, 'failed'],
    ],
  );
  assert.equal(await db.jobState(job.id), 'failed');
});

test("a script's own failure is final even with attempts left", async () => {
  const { worker } = await db.runningJob([spec('lint', { maxAttempts: 3 })]);
  const t = await db.claimNamed(worker, 'lint');
  const r = await db.finish(worker, t, 'failed', { transient: false });
  assert.deepEqual([r.state, r.job_state], ['failed', 'failed']);
});

test('a failure skips every task reachable from it, and the job fails', async () => {
  const { worker, job } = await db.runningJob([
    spec('build'),
    spec('other'),
    spec('test', { needs: ['build'] }),
    spec('package', { needs: ['test'] }),
    spec('deploy', { needs: ['package', 'other'] }),
  ]);
  const build = await db.claimNamed(worker, 'build');
  await db.finish(worker, build, 'failed');
  let tasks = await db.tasksOf(job.id);
  assert.equal(tasks.test!.state, 'skipped');
  assert.equal(tasks.package!.state, 'skipped');
  assert.equal(tasks.deploy!.state, 'skipped');
  assert.match(tasks.deploy!.error!, /build failed/);
  assert.equal(tasks.other!.state, 'queued', 'an unrelated branch goes on');
  const other = await db.claimNamed(worker, 'other');
  const r = await db.finish(worker, other, 'success');
  assert.equal(r.job_state, 'failed');
  tasks = await db.tasksOf(job.id);
  assert.equal(tasks.deploy!.state, 'skipped', 'a skipped task stays skipped');
});

test('an allow_failure task that fails lets its dependents run and the job succeed', async () => {
  const { worker, job } = await db.runningJob([
    spec('optional', { allowFailure: true }),
    spec('after', { needs: ['optional'] }),
  ]);
  await db.finish(worker, await db.claimNamed(worker, 'optional'), 'failed');
  assert.equal((await db.tasksOf(job.id)).after!.state, 'queued');
  const r = await db.finish(worker, await db.claimNamed(worker, 'after'), 'success');
  assert.equal(r.job_state, 'success');
});

test('a task whose producer did not give a declared output fails at promotion, naming both', async () => {
  const { worker, job } = await db.runningJob([
    spec('build', { outputs: ['version', 'digest'] }),
    spec('deploy', { needs: ['build'] }),
    spec('notify', { needs: ['deploy'] }),
  ]);
  const r = await db.finish(worker, await db.claimNamed(worker, 'build'), 'success', {
    outputs: { version: '1' },
  });
  assert.equal(r.job_state, 'failed', 'nothing is left to run, so the job settles');
  const tasks = await db.tasksOf(job.id);
  assert.equal(tasks.deploy!.state, 'failed');
  assert.equal(tasks.deploy!.error, 'needs output "digest" of "build", which finished without it');
  assert.equal(tasks.notify!.state, 'skipped');
  assert.equal(await claimTask(pool, worker, []), null, 'the failed child was never claimable');
});

test('an allow_failure producer that failed without its output fails the consumer', async () => {
  const { worker, job } = await db.runningJob([
    spec('probe', { allowFailure: true, outputs: ['result'] }),
    spec('use', { needs: ['probe'] }),
  ]);
  await db.finish(worker, await db.claimNamed(worker, 'probe'), 'failed');
  const tasks = await db.tasksOf(job.id);
  assert.equal(tasks.use!.state, 'failed');
  assert.match(tasks.use!.error!, /output "result" of "probe"/);
  assert.equal(await db.jobState(job.id), 'failed');
});

test('a task listing a secret the project lacks fails when the job starts, naming it', async () => {
  const project = await db.makeProject({ secrets: ['NPM_TOKEN'] });
  const worker = await db.makeWorker();
  const job = await db.startedJob(project, [
    spec('ok', { secrets: ['NPM_TOKEN'] }),
    spec('deploy', { secrets: ['NPM_TOKEN', 'DEPLOY_KEY'] }),
    spec('after-deploy', { needs: ['deploy'] }),
  ]);
  const tasks = await db.tasksOf(job.id);
  assert.equal(tasks.ok!.state, 'queued');
  assert.equal(tasks.deploy!.state, 'failed');
  assert.equal(
    tasks.deploy!.error,
    `secret DEPLOY_KEY is not set for project ${project}; set it with: npm run ctl -- secret set --project ${project} --name DEPLOY_KEY`,
  );
  assert.equal(tasks['after-deploy']!.state, 'skipped');
  const r = await db.finish(worker, await db.claimNamed(worker, 'ok'), 'success');
  assert.equal(r.job_state, 'failed');
});

test('claims take the oldest job first and only tasks whose labels the worker has', async () => {
  const project = await db.makeProject();
  const older = await db.startedJob(project, [
    spec('gpu-task', { labels: ['gpu'] }),
    spec('plain'),
  ]);
  const newer = await db.startedJob(project, [spec('plain-new')]);
  const linux = await db.makeWorker(['linux']);
  const first = await claimTask(pool, linux, ['linux']);
  assert.equal(first?.name, 'plain', 'the gpu task is not for this worker');
  assert.equal(first?.job_id, older.id);
  assert.equal((await claimTask(pool, linux, ['linux']))?.job_id, newer.id);
  assert.equal(await claimTask(pool, linux, ['linux']), null);
  const gpu = await db.makeWorker(['gpu', 'linux']);
  assert.equal((await claimTask(pool, gpu, ['gpu', 'linux']))?.name, 'gpu-task');
});

test('an empty claim writes nothing', async () => {
  const project = await db.makeProject();
  const worker = await db.makeWorker();
  // A task nobody can claim, so the claim reads rows and still finds nothing.
  await db.startedJob(project, [spec('special', { labels: ['never'] })]);
  const single = createPool({ url: db.url, max: 1 });
  // Every row of every table as it is stored: an insert adds a row, and an
  // update, a delete or a row lock changes its place (ctid) or its xmin or
  // xmax. (The statistics counters would show writes too, but the file's other
  // connections flush theirs up to a second late, into the measurement.)
  const rowVersions = async () => {
    const { rows: tables } = await pool.query<{ name: string }>(
      `select quote_ident(tablename) as name from pg_tables where schemaname = 'public' order by 1`,
    );
    const versions: Record<string, string> = {};
    for (const { name } of tables) {
      const { rows } = await pool.query(
        `select count(*)::int || ' ' || coalesce(md5(string_agg(
                  ctid::text || xmin::text || xmax::text, ',' order by ctid)), '') as v
           from ${name}`,
      );
      versions[name] = rows[0].v;
    }
    return versions;
  };
  try {
    await claimTask(single, worker, []); // warm up the connection
    const before = await rowVersions();
    for (let i = 0; i < 20; i++) assert.equal(await claimTask(single, worker, []), null);
    assert.deepEqual(await rowVersions(), before);
    // The same measurement does see a claim that took something.
    await db.startedJob(project, [spec('claimable')]);
    const job = await rowVersions();
    assert.ok(await claimTask(single, worker, []));
    assert.notDeepEqual(await rowVersions(), job, 'the row versions show a claim that wrote');
  } finally {
    await single.end();
  }
});

test('heartbeat and completion need the current lease and the worker that holds it', async () => {
  const project = await db.makeProject();
  const worker = await db.makeWorker();
  const intruder = await db.makeWorker();
  await db.startedJob(project, [spec('a')]);
  const t = await db.claimNamed(worker, 'a');
  const stale = '00000000-0000-4000-8000-000000000000';
  await assert.rejects(heartbeat(pool, worker, t.id, stale), ConflictError);
  await assert.rejects(heartbeat(pool, intruder, t.id, t.lease_id!), ConflictError);
  await assert.rejects(db.finish(worker, { id: t.id, lease_id: stale }, 'success'), ConflictError);
  await assert.rejects(db.finish(intruder, t, 'success'), ConflictError);
  await assert.rejects(heartbeat(pool, worker, stale, t.lease_id!), NotFoundError);
  await assert.rejects(
    db.finish(worker, { id: stale, lease_id: t.lease_id }, 'success'),
    NotFoundError,
  );
  const hb = await heartbeat(pool, worker, t.id, t.lease_id!, { leaseS: 600 });
  assert.ok(hb.lease_expires_at.getTime() > Date.now() + 500_000, 'the lease was extended');
});

test('repeating a completion with the same lease answers the same state; a different one conflicts', async () => {
  const { worker } = await db.runningJob([spec('a', { maxAttempts: 2 }), spec('b')]);
  const a = await db.claimNamed(worker, 'a');
  const first = await db.finish(worker, a, 'failed', { transient: true });
  assert.equal(first.state, 'queued');
  const again = await db.finish(worker, a, 'failed', { transient: true });
  assert.deepEqual([again.state, again.job_state], ['queued', null]);
  await assert.rejects(db.finish(worker, a, 'success'), ConflictError);
  const retry = await db.claimNamed(worker, 'a');
  assert.equal(retry.attempt, 2);
  // A replay is answered from the attempt it belongs to, even after the task moved on;
  // anything else with the old lease conflicts.
  assert.equal((await db.finish(worker, a, 'failed', { transient: true })).state, 'queued');
  await assert.rejects(heartbeat(pool, worker, a.id, a.lease_id!), ConflictError);
  await db.finish(worker, retry, 'success');

  const b = await db.claimNamed(worker, 'b');
  const done = await db.finish(worker, b, 'success');
  assert.equal(done.state, 'success');
  const repeat = await db.finish(worker, b, 'success');
  assert.deepEqual([repeat.state, repeat.job_state], ['success', null]);
  const { rows } = await pool.query(
    'select count(*)::int as n from task_attempts where task_id = $1',
    [b.id],
  );
  assert.equal(rows[0].n, 1);
});

test('cancel during a run: queued tasks are cancelled, the heartbeat says cancel, completion records cancelled', async () => {
  const { worker, job } = await db.runningJob([
    spec('long'),
    spec('waiting', { needs: ['long'] }),
    spec('queued-one'),
  ]);
  const long = await db.claimNamed(worker, 'long');
  const cancelled = await cancelJob(pool, job.id);
  assert.equal(cancelled.state, 'cancelled');
  let tasks = await db.tasksOf(job.id);
  assert.equal(tasks.waiting!.state, 'cancelled');
  assert.equal(tasks['queued-one']!.state, 'cancelled');
  assert.equal(tasks.long!.state, 'running', 'the runner is told; the task ends when it reports');
  assert.equal((await heartbeat(pool, worker, long.id, long.lease_id!)).cancel, true);
  assert.equal(await claimTask(pool, worker, []), null);
  const r = await db.finish(worker, long, 'success');
  assert.deepEqual([r.state, r.job_state], ['cancelled', null]);
  tasks = await db.tasksOf(job.id);
  assert.equal(tasks.long!.state, 'cancelled');
  assert.equal(await db.jobState(job.id), 'cancelled');
  const again = await cancelJob(pool, job.id);
  assert.equal(again.state, 'cancelled', 'cancelling a finished job answers it unchanged');
});

test('a new job on a branch cancels the older unfinished jobs of that branch only', async () => {
  const project = await db.makeProject();
  const push = (ref: string, n: number) => db.pendingJob(project, { ref, sha: sha(n) });
  const first = await push('refs/heads/main', 1);
  const otherBranch = await push('refs/heads/dev', 2);
  const second = await push('refs/heads/main', 3);
  assert.deepEqual(second.superseded, [first.job.id]);
  assert.equal(await db.jobState(first.job.id), 'cancelled');
  assert.equal(await db.jobState(otherBranch.job.id), 'pending');
  const { rows } = await pool.query('select error from jobs where id = $1', [first.job.id]);
  assert.equal(rows[0].error, `superseded by job #${second.job.number}`);
});

test('tags, reruns and projects that turned it off never cancel superseded jobs', async () => {
  const project = await db.makeProject();
  const tag = (n: number) =>
    createJob(pool, {
      projectId: project,
      ref: 'refs/tags/v1',
      sha: sha(n),
      trigger: 'tag',
      trusted: true,
    });
  const t1 = await tag(1);
  await tag(2);
  assert.equal(await db.jobState(t1.job.id), 'pending');

  const off = await db.makeProject({ cancelSuperseded: false });
  const a = await db.pendingJob(off, { sha: sha(1) });
  await db.pendingJob(off, { sha: sha(2) });
  assert.equal(await db.jobState(a.job.id), 'pending');
});

test('a manual run supersedes nothing: a job waiting at a block step stays; a later push cancels both', async () => {
  const project = await db.makeProject();
  const worker = await db.makeWorker();
  const block = { prompt: 'Deploy?', fields: [], timeoutS: 3600, onTimeout: 'fail' as const };
  const deploy = await db.startedJob(
    project,
    [spec('build'), spec('approve', { needs: ['build'], block })],
    { ref: 'refs/heads/main' },
  );
  await db.finish(worker, await db.claimNamed(worker, 'build'), 'success');
  assert.equal((await db.tasksOf(deploy.id)).approve!.state, 'blocked');
  const manual = await db.pendingJob(project, { sha: sha(2), trigger: 'manual' });
  assert.deepEqual(manual.superseded, []);
  assert.equal(await db.jobState(deploy.id), 'running');
  assert.equal((await db.tasksOf(deploy.id)).approve!.state, 'blocked');
  const pushed = await db.pendingJob(project, { sha: sha(3) });
  assert.deepEqual(new Set(pushed.superseded), new Set([deploy.id, manual.job.id]));
  assert.equal(await db.jobState(deploy.id), 'cancelled');
  assert.equal(await db.jobState(manual.job.id), 'cancelled');
});

test('a pull request job supersedes the older ones of the same pull request; closing it cancels them', async () => {
  const project = await db.makeProject();
  const pr = (n: number, number: number) =>
    createJob(pool, {
      projectId: project,
      ref: `refs/pull/${number}/head`,
      sha: sha(n),
      trigger: 'pull_request',
      pullRequest: number,
      baseRef: 'main',
      trusted: false,
    });
  const a = await pr(1, 7);
  const b = await pr(2, 7);
  const other = await pr(3, 8);
  assert.equal(await db.jobState(a.job.id), 'cancelled');
  assert.deepEqual(await cancelPullRequest(pool, project, 7), [b.job.id]);
  assert.equal(await db.jobState(b.job.id), 'cancelled');
  assert.equal(await db.jobState(other.job.id), 'pending');
  const { rows } = await pool.query('select error from jobs where id = $1', [b.job.id]);
  assert.equal(rows[0].error, 'pull request #7 was closed');
});

test('rerun of the failed tasks keeps the successful ones with their outputs and runs the rest', async () => {
  const { project, worker, job } = await db.runningJob([
    spec('build', { outputs: ['version'] }),
    spec('test', { needs: ['build'] }),
    spec('deploy', { needs: ['test'] }),
  ]);
  await db.finish(worker, await db.claimNamed(worker, 'build'), 'success', {
    outputs: { version: '7' },
  });
  await db.finish(worker, await db.claimNamed(worker, 'test'), 'failed');
  assert.equal(await db.jobState(job.id), 'failed');

  const running = await db.startedJob(project, [spec('x')]);
  await assert.rejects(
    rerunJob(pool, running.id, true),
    ConflictError,
    'a running job cannot be rerun',
  );
  await cancelJob(pool, running.id);

  const rerun = await rerunJob(pool, job.id, true);
  assert.equal(rerun.dispatch, false);
  assert.equal(rerun.job.trigger, 'rerun');
  assert.equal(rerun.job.rerun_of, job.id);
  assert.equal(rerun.job.sha, job.sha);
  assert.equal(rerun.job.state, 'running');
  const tasks = await db.tasksOf(rerun.job.id);
  assert.equal(tasks.build!.state, 'success');
  assert.ok(tasks.build!.copied_from);
  assert.equal(tasks.test!.state, 'queued');
  assert.equal(tasks.deploy!.state, 'waiting');
  const { rows } = await pool.query('select name, value from task_outputs where task_id = $1', [
    tasks.build!.id,
  ]);
  assert.deepEqual(rows, [{ name: 'version', value: '7' }]);
  await db.finish(worker, await db.claimNamed(worker, 'test'), 'success');
  const r = await db.finish(worker, await db.claimNamed(worker, 'deploy'), 'success');
  assert.equal(r.job_state, 'success');
  assert.equal(await db.jobState(job.id), 'failed', 'the first job keeps its state');
});

test('a failed-only rerun of a job where nothing failed is a new job of kept tasks, finished at once', async () => {
  const { worker, job } = await db.runningJob([
    spec('build', { outputs: ['version'] }),
    spec('test', { needs: ['build'] }),
    spec('rollback', { needs: ['test'], when: 'on_failure' }),
  ]);
  await db.finish(worker, await db.claimNamed(worker, 'build'), 'success', {
    outputs: { version: '7' },
  });
  await db.finish(worker, await db.claimNamed(worker, 'test'), 'success');
  assert.equal(await db.jobState(job.id), 'success');

  const rerun = await rerunJob(pool, job.id, true);
  assert.equal(rerun.dispatch, false);
  assert.equal(rerun.job.rerun_of, job.id);
  assert.equal(rerun.jobState, 'success');
  assert.equal(await db.jobState(rerun.job.id), 'success');
  const tasks = await db.tasksOf(rerun.job.id);
  assert.deepEqual(
    Object.values(tasks)
      .sort((a, b) => a.position - b.position)
      .map((t) => [t.name, t.state, t.copied_from !== null]),
    [
      ['build', 'success', true],
      ['test', 'success', true],
      ['rollback', 'skipped', false],
    ],
  );
  const { rows } = await pool.query('select value from task_outputs where task_id = $1', [
    tasks.build!.id,
  ]);
  assert.deepEqual(rows, [{ value: '7' }]);
});

test('a failed-only rerun runs again the when: always and on_failure tasks after what it reruns', async () => {
  const { worker, job } = await db.runningJob([
    spec('build'),
    spec('test', { needs: ['build'] }),
    spec('rollback', { needs: ['test'], when: 'on_failure' }),
    spec('notify', { needs: ['test'], when: 'always' }),
    spec('archive', { needs: ['notify'] }),
    spec('lint'),
    spec('report', { needs: ['lint'], when: 'always' }),
  ]);
  await db.finish(worker, await db.claimNamed(worker, 'build'), 'success');
  await db.finish(worker, await db.claimNamed(worker, 'test'), 'failed');
  await db.finish(worker, await db.claimNamed(worker, 'rollback'), 'success');
  await db.finish(worker, await db.claimNamed(worker, 'notify'), 'success');
  await db.finish(worker, await db.claimNamed(worker, 'archive'), 'success');
  await db.finish(worker, await db.claimNamed(worker, 'lint'), 'success');
  await db.finish(worker, await db.claimNamed(worker, 'report'), 'success');
  assert.equal(await db.jobState(job.id), 'failed');

  const rerun = await rerunJob(pool, job.id, true);
  const tasks = await db.tasksOf(rerun.job.id);
  // test runs again, and so does every task after it (those that ran because
  // it failed, and what needs them); lint and report, which do not follow
  // test, are kept.
  assert.deepEqual(
    Object.values(tasks)
      .sort((a, b) => a.position - b.position)
      .map((t) => [t.name, t.state, t.copied_from !== null]),
    [
      ['build', 'success', true],
      ['test', 'queued', false],
      ['rollback', 'waiting', false],
      ['notify', 'waiting', false],
      ['archive', 'waiting', false],
      ['lint', 'success', true],
      ['report', 'success', true],
    ],
  );
  await db.finish(worker, await db.claimNamed(worker, 'test'), 'success');
  await db.finish(worker, await db.claimNamed(worker, 'notify'), 'success');
  const n = await db.finish(worker, await db.claimNamed(worker, 'archive'), 'success');
  assert.equal(n.job_state, 'success');
  const after = await db.tasksOf(rerun.job.id);
  assert.equal(after.rollback!.state, 'skipped', 'nothing it needs failed this time');
});

test('rerun of all tasks runs every task again and cancels nothing', async () => {
  const { worker, job } = await db.runningJob([spec('a'), spec('b', { needs: ['a'] })], {
    ref: 'refs/heads/main',
  });
  await db.finish(worker, await db.claimNamed(worker, 'a'), 'success');
  await db.finish(worker, await db.claimNamed(worker, 'b'), 'success');
  const first = await rerunJob(pool, job.id, false);
  const second = await rerunJob(pool, job.id, false);
  assert.equal(await db.jobState(first.job.id), 'running', 'a rerun does not supersede');
  const tasks = await db.tasksOf(second.job.id);
  assert.equal(tasks.a!.state, 'queued');
  assert.equal(tasks.b!.state, 'waiting');
});

test('rerun of a job that never compiled asks for a compile', async () => {
  const project = await db.makeProject();
  const { job } = await db.pendingJob(project);
  await cancelJob(pool, job.id);
  const rerun = await rerunJob(pool, job.id, true);
  assert.equal(rerun.dispatch, true);
  assert.equal(rerun.job.state, 'pending');
});
