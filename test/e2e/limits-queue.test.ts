// Queue time (docs/limits.md): a queued task that no worker claims within its
// queue_timeout fails naming its labels and its pool, through the real sweep.
// Time passes by moving queued_at back in the database.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runSweep } from '../../lib/app/sweep.ts';
import { githubPullRequest, githubPush } from '../forge/fixtures/github.ts';
import { deliverRunning, getJob, startE2E } from './calls.ts';
import { pipeline, sha } from './payloads.ts';

const REPO = 'acme/queue';
const {
  fake,
  stack,
  projects: { project },
} = await startE2E(import.meta.filename, {
  projects: {
    project: {
      forge: 'github',
      id: 'queue',
      repo: REPO,
      cancel_superseded: false,
      fork_pull_requests: 'run',
    },
  },
});

/** Makes the job's queued tasks look queued `hours` ago. */
async function queuedHoursAgo(jobId: string, hours: number): Promise<void> {
  await stack.context.pool.query(
    `update tasks set queued_at = now() - make_interval(hours => $2)
      where job_id = $1 and state = 'queued'`,
    [jobId, hours],
  );
}

test('a task no worker claims within its queue_timeout fails naming its labels, and what needs it is skipped', async () => {
  const commit = sha('queue-timeout');
  fake.setFile(
    REPO,
    commit,
    pipeline(
      'gpu-nowhere',
      `  train:
    queue_timeout: 1h
    script: [make train]
  report:
    needs: [train]
    script: [make report]
  patient:
    script: [make wait]
`,
    ),
  );
  const { hook } = await deliverRunning(
    stack,
    'github',
    'push',
    githubPush(REPO, commit, { ref: 'refs/heads/queue' }),
    project.secret,
  );
  const jobId = hook.body.job_id;
  await queuedHoursAgo(jobId, 2);

  const summary = await runSweep(stack.context);
  assert.equal(summary.tasks_queue_timed_out, 1, JSON.stringify(summary));
  const view = await getJob(stack, jobId);
  const byName = Object.fromEntries(view.tasks.map((t: { name: string }) => [t.name, t]));
  assert.equal(byName.train.state, 'failed');
  assert.equal(
    byName.train.error,
    'no worker with labels [gpu-nowhere] (trusted pool) claimed it within 1h',
  );
  assert.equal(byName.report.state, 'skipped');
  assert.equal(byName.report.error, 'skipped: train failed');
  // Two hours is within the default of 24.
  assert.equal(byName.patient.state, 'queued');

  await queuedHoursAgo(jobId, 25);
  assert.equal((await runSweep(stack.context)).tasks_queue_timed_out, 1);
  const done = await getJob(stack, jobId);
  assert.equal(
    done.tasks.find((t: { name: string }) => t.name === 'patient').error,
    'no worker with labels [gpu-nowhere] (trusted pool) claimed it within 24h',
  );
  assert.equal(done.job.state, 'failed');
});

test('an untrusted task says it waited for the untrusted pool; defaults.queue_timeout applies to every task', async () => {
  const head = sha('queue-fork');
  fake.setFile(
    REPO,
    head,
    `version: 1
defaults:
  queue_timeout: 30m
tasks:
  build:
    labels: []
    script: [make]
`,
  );
  const { hook } = await deliverRunning(
    stack,
    'github',
    'pull_request',
    githubPullRequest('opened', { repo: REPO, number: 4, headSha: head, headRepo: 'eve/queue' }),
    project.secret,
  );
  const jobId = hook.body.job_id;
  await queuedHoursAgo(jobId, 1);
  await runSweep(stack.context);
  const view = await getJob(stack, jobId);
  assert.equal(view.job.trusted, false);
  assert.equal(view.tasks[0].error, 'no worker (untrusted pool) claimed it within 30m');
  assert.equal(view.job.state, 'failed');
});
