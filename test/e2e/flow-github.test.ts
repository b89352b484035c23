import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startFakeForge } from '../helpers/fake-forge.ts';
import { testStack } from '../helpers/stack.ts';
import { fullFlow } from './flow.ts';
import {
  claimTask,
  complete,
  createProject,
  createWorker,
  githubPush,
  pipeline,
  sendWebhook,
  sha,
  waitForJob,
} from './support.ts';

const fake = await startFakeForge();
const stack = await testStack(import.meta.filename, { CONDUCTOR_GITHUB_API_URL: fake.url });

test('a signed GitHub push runs from webhook to a successful job, with logs, secrets and outputs', async () => {
  await fullFlow(stack, fake, 'github');
});

test('a GitHub project without a forge token reads the file without Authorization and hands out no clone token', async () => {
  const repo = 'northwind/public-site';
  const { secret } = await createProject(stack, {
    id: 'gh-public',
    name: 'public site',
    forge: 'github',
    repo,
    repo_url: `https://github.com/${repo}.git`,
  });
  const { token } = await createWorker(stack, ['gh-public']);
  const commit = sha('gh-public');
  fake.setFile(repo, commit, pipeline('gh-public', '  site:\n    script: [make site]\n'));

  const hook = await sendWebhook(stack, 'github', 'push', githubPush(repo, commit), { secret });
  assert.equal(hook.status, 202, hook.text);
  const view = await waitForJob(stack, hook.body.job_id);
  assert.equal(view.job.state, 'running');

  const [request] = fake.requestsFor(commit);
  assert.ok(request);
  assert.equal(request.path, `/repos/${repo}/contents/.conductor.yml`);
  assert.equal(request.headers.authorization, undefined);

  const task = await claimTask(stack, token);
  assert.deepEqual(task.repo, {
    url: `https://github.com/${repo}.git`,
    sha: commit,
    ref: 'refs/heads/main',
  });
  const done = await complete(stack, token, task.id, {
    lease_id: task.lease_id,
    outcome: 'success',
  });
  assert.deepEqual(done.body, { state: 'success', job_state: 'success' });
});

test('a pushed annotated tag builds the tagged commit with trigger tag', async () => {
  const repo = 'northwind/releases';
  const { secret } = await createProject(stack, {
    id: 'gh-tags',
    name: 'releases',
    forge: 'github',
    repo,
    repo_url: `https://github.com/${repo}.git`,
  });
  const tagObject = sha('tag-object');
  const tagged = sha('tagged-commit');
  fake.setFile(repo, tagged, pipeline('gh-tags', '  release:\n    script: [make release]\n'));
  const payload = {
    ...githubPush(repo, tagObject, { ref: 'refs/tags/v2.4.0' }),
    created: true,
    base_ref: 'refs/heads/main',
    head_commit: { ...githubPush(repo, tagged).head_commit },
  };
  const hook = await sendWebhook(stack, 'github', 'push', payload, { secret });
  assert.equal(hook.status, 202, hook.text);
  const view = await waitForJob(stack, hook.body.job_id);
  assert.equal(view.job.state, 'running', JSON.stringify(view.job));
  assert.equal(view.job.trigger, 'tag');
  assert.equal(view.job.ref, 'refs/tags/v2.4.0');
  assert.equal(view.job.sha, tagged);
  assert.equal(fake.requestsFor(tagged).length, 1);
  assert.equal(fake.requestsFor(tagObject).length, 0);
});
