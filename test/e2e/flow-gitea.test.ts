import assert from 'node:assert/strict';
import { test } from 'node:test';
import { giteaPullRequest, giteaPush } from '../forge/fixtures/gitea.ts';
import {
  claimTask,
  createWorker,
  deliverRunning,
  getJob,
  heartbeat,
  sendWebhook,
  startE2E,
} from './calls.ts';
import { fullFlow } from './flow.ts';
import { pipeline, sha } from './payloads.ts';

const { fake, stack, addProject } = await startE2E(import.meta.filename, { githubApi: false });

test('a signed Gitea push runs from webhook to a successful job, with logs, secrets and outputs', async () => {
  await fullFlow(stack, fake, 'gitea');
});

test('a Gitea project without a forge token reads the raw file without Authorization and hands out no clone token', async () => {
  const repo = 'harbor/buoys';
  const { secret } = await addProject({
    forge: 'gitea',
    id: 'gitea-public',
    name: 'buoys',
    repo,
    forge_url: `${fake.url}/`,
  });
  const { token } = await createWorker(stack, ['gitea-public']);
  const commit = sha('gitea-public');
  fake.setFile(repo, commit, pipeline('gitea-public', '  buoys:\n    script: [go test ./...]\n'));

  await deliverRunning(stack, 'gitea', 'push', giteaPush(repo, commit), secret);

  const [request] = fake.requestsFor(commit);
  assert.ok(request);
  assert.equal(
    request.path,
    `/api/v1/repos/${repo}/raw/.conductor.yml`,
    'one slash after the base',
  );
  assert.equal(request.headers.authorization, undefined);

  const task = await claimTask(stack, token);
  assert.deepEqual(task.repo, {
    url: `https://gitea.example/${repo}.git`,
    sha: commit,
    ref: 'refs/heads/main',
  });
});

test('a Gitea pull request update (action synchronized) builds the head commit at refs/pull/N/head', async () => {
  const repo = 'harbor/charts';
  // Without a forge token Gitea cannot confirm the sender as a writer, so the
  // pull request is untrusted; 'run' runs it at once (test/e2e/trust.test.ts
  // has the confirmation).
  const { secret } = await addProject({
    forge: 'gitea',
    id: 'gitea-pr',
    name: 'charts',
    repo,
    fork_pull_requests: 'run',
  });
  const head = sha('gitea-pr-head');
  fake.setFile(repo, head, pipeline('gitea-pr', '  charts:\n    script: [make]\n'));
  const { hook, view } = await deliverRunning(
    stack,
    'gitea',
    'pull_request',
    giteaPullRequest('synchronized', { repo, number: 12, headSha: head }),
    secret,
  );
  assert.equal(view.job.trigger, 'pull_request');
  assert.equal(view.job.ref, 'refs/pull/12/head');
  assert.equal(view.job.sha, head);
  assert.equal(view.job.trusted, false);
  const { token } = await createWorker(stack, ['gitea-pr'], 'gitea-pr', { untrusted: true });
  const task = await claimTask(stack, token);
  assert.equal(task.repo.ref, 'refs/pull/12/head');

  // Closing the pull request cancels its job; the runner hears it on its next heartbeat.
  const closed = await sendWebhook(
    stack,
    'gitea',
    'pull_request',
    giteaPullRequest('closed', { repo, number: 12, headSha: head }),
    { secret },
  );
  assert.equal(closed.status, 200, closed.text);
  assert.equal(typeof closed.body.ignored, 'string');
  assert.equal((await getJob(stack, hook.body.job_id)).job.state, 'cancelled');
  const beat = await heartbeat(stack, token, task.id, task.lease_id);
  assert.equal(beat.body.cancel, true);
});
