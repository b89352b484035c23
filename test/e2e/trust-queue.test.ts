// Why an untrusted task waits, as the job view says it. A file of its own: the
// answer depends on every worker registered, so no other test may register
// untrusted workers in this database.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { githubPullRequest } from '../forge/fixtures/github.ts';
import { claim, claimTask, createWorker, deliverRunning, getJob, startE2E } from './calls.ts';
import { pipeline, sha } from './payloads.ts';

const { fake, stack, projects } = await startE2E(import.meta.filename, {
  projects: {
    forks: { forge: 'github', id: 'forks', repo: 'acme/forks', fork_pull_requests: 'run' },
  },
});

test('an untrusted task with no untrusted worker waits queued, and the job view says why until one registers', async () => {
  const repo = 'acme/forks';
  const head = sha('queue-fork');
  fake.setFile(repo, head, pipeline('gpu', '  train:\n    script: [make]\n'));
  const { token: trusted } = await createWorker(stack, ['gpu'], 'trusted-gpu');
  const { hook, view } = await deliverRunning(
    stack,
    'github',
    'pull_request',
    githubPullRequest('opened', { repo, number: 1, headSha: head, headRepo: 'eve/forks' }),
    projects.forks.secret,
  );
  assert.equal(view.job.trusted, false);
  assert.equal(view.tasks[0].state, 'queued');
  assert.equal(view.tasks[0].queue_reason, 'no untrusted worker is registered');
  assert.equal((await claim(stack, trusted)).status, 204, 'the trusted worker has the label');

  const { token: cpu } = await createWorker(stack, ['cpu'], 'untrusted-cpu', { untrusted: true });
  const narrowed = await getJob(stack, hook.body.job_id);
  assert.equal(narrowed.tasks[0].queue_reason, 'no untrusted worker has the labels gpu');
  assert.equal((await claim(stack, cpu)).status, 204);

  const { token: gpu } = await createWorker(stack, ['gpu'], 'untrusted-gpu', { untrusted: true });
  assert.equal((await getJob(stack, hook.body.job_id)).tasks[0].queue_reason, null);
  const task = await claimTask(stack, gpu);
  assert.equal(task.job_id, hook.body.job_id);
  const running = await getJob(stack, hook.body.job_id);
  assert.equal(running.tasks[0].state, 'running');
  assert.equal(running.tasks[0].queue_reason, null);
});
