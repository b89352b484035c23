import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Context } from 'aws-lambda';
import { handler as compileHandler } from '../../functions/compile.ts';
import { dispatchCompile } from '../../lib/app/dispatch.ts';
import { runSweep } from '../../lib/app/sweep.ts';
import { sweep } from '../../lib/scheduler/index.ts';
import { giteaPush } from '../forge/fixtures/gitea.ts';
import {
  claimTask,
  createWorker,
  getJob,
  type Json,
  pushToBranch,
  sendWebhook,
  startE2E,
  waitForJob,
} from './calls.ts';
import { pipeline, sha } from './payloads.ts';

const REPO = 'acme/pipelines';
const GITEA_REPO = 'acme/pipelines-gitea';
const {
  fake,
  stack,
  projects: { project, giteaProject },
} = await startE2E(import.meta.filename, {
  projects: {
    project: { forge: 'github', id: 'pipelines', repo: REPO, cancel_superseded: false },
    giteaProject: {
      forge: 'gitea',
      id: 'pipelines-gitea',
      name: 'pipelines gitea',
      repo: GITEA_REPO,
      cancel_superseded: false,
    },
  },
});

let branches = 0;
/** Pushes `commit` to a branch of its own and answers the job id. */
async function push(commit: string): Promise<string> {
  return pushToBranch(stack, { repo: REPO, secret: project.secret }, commit, `b${++branches}`);
}

const LINE = /^\.conductor\.yml:(\d+):(\d+): (.+)$/;

/** Each line of `error` is the matching entry of `errors`, as `.conductor.yml:LINE:COLUMN: path: message`. */
function assertErrorsAgree(job: Record<string, Json>): void {
  assert.equal(typeof job.error, 'string');
  assert.ok(Array.isArray(job.errors), `errors is a list: ${JSON.stringify(job.errors)}`);
  const lines = job.error.split('\n');
  assert.equal(lines.length, job.errors.length);
  job.errors.forEach((e: Json, i: number) => {
    assert.deepEqual(Object.keys(e).sort(), ['column', 'line', 'message', 'path']);
    assert.equal(typeof e.line, 'number');
    assert.equal(typeof e.column, 'number');
    assert.ok(e.line >= 1 && e.column >= 1);
    assert.match(lines[i], LINE);
    const where = e.path === '' ? '' : `${e.path}: `;
    assert.equal(lines[i], `.conductor.yml:${e.line}:${e.column}: ${where}${e.message}`);
  });
}

test('a broken pipeline fails the job with every error at its line and column, and nothing runs', async () => {
  const commit = sha('broken');
  fake.setFile(
    REPO,
    commit,
    `version: 1
tasks:
  build:
    script: [make]
    timeout: 0
  test:
    needs: [biuld]
    script: [make test]
`,
  );
  const view = await waitForJob(stack, await push(commit));
  assert.equal(view.job.state, 'failed');
  assert.equal(view.job.started_at, null);
  assert.notEqual(view.job.finished_at, null);
  assert.deepEqual(view.tasks, []);
  assertErrorsAgree(view.job);
  const byPath = Object.fromEntries(view.job.errors.map((e: Json) => [e.path, e]));
  assert.deepEqual(Object.keys(byPath).sort(), ['tasks.build.timeout', 'tasks.test.needs[0]']);
  assert.equal(byPath['tasks.build.timeout'].line, 5);
  assert.equal(byPath['tasks.build.timeout'].column, 14);
  assert.equal(byPath['tasks.test.needs[0]'].line, 7);
  assert.equal(byPath['tasks.test.needs[0]'].column, 13);
  assert.match(byPath['tasks.test.needs[0]'].message, /biuld/);
});

test('a YAML syntax error fails the job at its line and column', async () => {
  const commit = sha('syntax');
  fake.setFile(REPO, commit, 'version: 1\ntasks:\n  build:\n    script: [make\n');
  const view = await waitForJob(stack, await push(commit));
  assert.equal(view.job.state, 'failed');
  assertErrorsAgree(view.job);
  assert.ok(view.job.errors.length >= 1);
});

test('an unknown key and a wrong version are reported by path', async () => {
  const commit = sha('unknown-key');
  fake.setFile(REPO, commit, 'version: "1"\ntasks:\n  a:\n    script: [make]\n    scirpt: [x]\n');
  const view = await waitForJob(stack, await push(commit));
  assert.equal(view.job.state, 'failed');
  assertErrorsAgree(view.job);
  const paths = view.job.errors.map((e: Json) => e.path);
  assert.ok(paths.includes('version'), JSON.stringify(paths));
  assert.ok(
    paths.some((p: string) => p.startsWith('tasks.a')),
    JSON.stringify(paths),
  );
});

test('a commit without the pipeline file fails with "no .conductor.yml at <sha>"', async () => {
  const commit = sha('no-file');
  const view = await waitForJob(stack, await push(commit));
  assert.equal(view.job.state, 'failed');
  assert.equal(view.job.error, `no .conductor.yml at ${commit}`);
  assert.equal(fake.requestsFor(commit).length, 1);
  assert.equal(fake.requestsFor(commit)[0]!.answered, 404);

  const giteaCommit = sha('no-file-gitea');
  const hook = await sendWebhook(stack, 'gitea', 'push', giteaPush(GITEA_REPO, giteaCommit), {
    secret: giteaProject.secret,
  });
  const gitea = await waitForJob(stack, hook.body.job_id);
  assert.equal(gitea.job.state, 'failed');
  assert.equal(gitea.job.error, `no .conductor.yml at ${giteaCommit}`);
});

test('a task that lists a secret the project lacks fails, naming it, and the job fails', async () => {
  const commit = sha('missing-secret');
  fake.setFile(
    REPO,
    commit,
    pipeline(
      'missing-secret',
      '  deploy:\n    secrets: [NOPE_TOKEN]\n    script: [make deploy]\n  after:\n    needs: [deploy]\n    script: [make]\n',
    ),
  );
  // The job starts, then settles in a transaction of its own: wait for the settle.
  const view = await waitForJob(stack, await push(commit), (v) => v.job.finished_at !== null);
  assert.equal(view.job.state, 'failed');
  const [deploy, after] = view.tasks;
  assert.equal(deploy.state, 'failed');
  assert.match(deploy.error, /NOPE_TOKEN/);
  assert.equal(after.state, 'skipped');
});

test('while the forge answers 500 the job stays pending and says why; the sweep compiles it once the forge is back', async () => {
  const label = 'forge-down';
  const commit = sha(label);
  fake.setFile(REPO, commit, pipeline(label, '  a:\n    script: [make]\n'));
  fake.down(500);
  let jobId: string;
  try {
    jobId = await push(commit);
    const waiting = await waitForJob(stack, jobId, (v) => v.job.error !== null);
    assert.equal(waiting.job.state, 'pending');
    assert.match(waiting.job.error, /HTTP 500/);
    assert.deepEqual(waiting.tasks, []);
    // A sweep while the forge is still down leaves it pending.
    await runSweep(stack.context, { compileStaleS: 0 });
    const still = await waitForJob(stack, jobId, () => fake.requestsFor(commit).length >= 2);
    assert.equal(still.job.state, 'pending');
  } finally {
    fake.up();
  }
  const summary = await sweep(stack.context.pool, { compileStaleS: 0 });
  assert.ok(summary.dispatch.includes(jobId), JSON.stringify(summary));
  // Dispatched twice (Lambda retries async invocations): the job starts once.
  for (const id of summary.dispatch) {
    await dispatchCompile(stack.context, id);
    await dispatchCompile(stack.context, id);
  }
  const running = await waitForJob(stack, jobId);
  assert.equal(running.job.state, 'running', JSON.stringify(running.job));
  assert.equal(running.job.error, null, 'the forge error is gone once the job started');
  assert.equal(running.tasks.length, 1);
  const { token } = await createWorker(stack, [label]);
  const task = await claimTask(stack, token);
  assert.equal(task.job_id, jobId);
});

test('a forge that drops the connection leaves the job pending too, and runSweep retries it', async () => {
  const label = 'forge-reset';
  const commit = sha(label);
  fake.setFile(REPO, commit, pipeline(label, '  a:\n    script: [make]\n'));
  fake.down('reset');
  let jobId: string;
  try {
    jobId = await push(commit);
    const waiting = await waitForJob(stack, jobId, (v) => v.job.error !== null);
    assert.equal(waiting.job.state, 'pending');
    assert.match(waiting.job.error, /could not be reached|broke off/);
  } finally {
    fake.up();
  }
  const summary = await runSweep(stack.context, { compileStaleS: 0 });
  assert.ok(summary.compiles_redispatched >= 1);
  const running = await waitForJob(stack, jobId);
  assert.equal(running.job.state, 'running', JSON.stringify(running.job));
});

test('the compile function takes {job_id}, and invoked twice at once starts the job once', async () => {
  const label = 'compile-twice';
  const commit = sha(label);
  fake.down(500);
  let jobId: string;
  try {
    jobId = await push(commit);
    await waitForJob(stack, jobId, (v) => v.job.error !== null);
  } finally {
    fake.up();
  }
  fake.setFile(
    REPO,
    commit,
    pipeline(label, '  a:\n    script: [make]\n  b:\n    script: [make]\n'),
  );
  const invoke = () => compileHandler({ job_id: jobId }, {} as Context);
  const outcomes = await Promise.all([invoke(), invoke()]);
  assert.deepEqual(outcomes.map((o) => o.outcome).sort(), ['not_pending', 'started']);
  const view = await getJob(stack, jobId);
  assert.equal(view.job.state, 'running');
  assert.equal(view.tasks.length, 2);
  await assert.rejects(compileHandler({ job_id: 'nope' }, {} as Context));
});

test('a job whose forge stays down fails after its last compile attempt, with the reason', async () => {
  const commit = sha('forge-gone');
  fake.setFile(REPO, commit, pipeline('forge-gone', '  a:\n    script: [make]\n'));
  fake.down(503);
  try {
    const jobId = await push(commit);
    await waitForJob(stack, jobId, (v) => v.job.error !== null);
    const summary = await sweep(stack.context.pool, { compileStaleS: 0, maxCompileAttempts: 1 });
    assert.ok(summary.compiles_failed >= 1);
    const view = await getJob(stack, jobId);
    assert.equal(view.job.state, 'failed');
    assert.match(view.job.error, /could not be read after 1 attempts/);
    assert.match(view.job.error, /HTTP 503/);
  } finally {
    fake.up();
  }
});

test('a forge that refuses the token fails the job at once with a reason that says so', async () => {
  const commit = sha('refused');
  fake.down(401);
  try {
    const view = await waitForJob(stack, await push(commit));
    assert.equal(view.job.state, 'failed');
    assert.match(view.job.error, /refused access/);
    assert.match(view.job.error, /forge token/);
  } finally {
    fake.up();
  }
});

test('a job left pending by a down forge cannot be rerun, can be cancelled, and then never starts', async () => {
  const label = 'pending-cancel';
  const commit = sha(label);
  fake.setFile(REPO, commit, pipeline(label, '  a:\n    script: [make]\n'));
  fake.down(502);
  let jobId: string;
  try {
    jobId = await push(commit);
    await waitForJob(stack, jobId, (v) => v.job.error !== null);
    const rerun = await stack.call('POST', `/v1/jobs/${jobId}/rerun`, {
      token: stack.adminToken,
      body: {},
    });
    assert.equal(rerun.status, 409, rerun.text);
    const cancel = await stack.call('POST', `/v1/jobs/${jobId}/cancel`, {
      token: stack.adminToken,
    });
    assert.equal(cancel.status, 200, cancel.text);
    assert.equal(cancel.body.job.state, 'cancelled');
  } finally {
    fake.up();
  }
  const summary = await sweep(stack.context.pool, { compileStaleS: 0 });
  assert.ok(!summary.dispatch.includes(jobId));
  await compileHandler({ job_id: jobId }, {} as Context);
  const view = await getJob(stack, jobId);
  assert.equal(view.job.state, 'cancelled');
  assert.deepEqual(view.tasks, []);
});
