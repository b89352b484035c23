import assert from 'node:assert/strict';
import { test } from 'node:test';
import { githubPush } from '../forge/fixtures/github.ts';
import { claimTask, complete, createWorker, deliverRunning, startE2E } from './calls.ts';
import { fullFlow } from './flow.ts';
import { pipeline, sha } from './payloads.ts';

const { fake, stack, addProject } = await startE2E(import.meta.filename);

test('a signed GitHub push runs from webhook to a successful job, with logs, secrets and outputs', async () => {
  await fullFlow(stack, fake, 'github');
});

test('a GitHub project without a forge token reads the file without Authorization and hands out no clone token', async () => {
  const repo = 'northwind/public-site';
  const { secret } = await addProject({
    forge: 'github',
    id: 'gh-public',
    name: 'public site',
    repo,
  });
  const { token } = await createWorker(stack, ['gh-public']);
  const commit = sha('gh-public');
  fake.setFile(repo, commit, pipeline('gh-public', '  site:\n    script: [make site]\n'));

  await deliverRunning(stack, 'github', 'push', githubPush(repo, commit), secret);

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
  const { secret } = await addProject({ forge: 'github', id: 'gh-tags', name: 'releases', repo });
  const tagObject = sha('tag-object');
  const tagged = sha('tagged-commit');
  fake.setFile(repo, tagged, pipeline('gh-tags', '  release:\n    script: [make release]\n'));
  const payload = {
    ...githubPush(repo, tagObject, { ref: 'refs/tags/v2.4.0' }),
    created: true,
    base_ref: 'refs/heads/main',
    head_commit: { ...githubPush(repo, tagged).head_commit },
  };
  const { view } = await deliverRunning(stack, 'github', 'push', payload, secret);
  assert.equal(view.job.trigger, 'tag');
  assert.equal(view.job.ref, 'refs/tags/v2.4.0');
  assert.equal(view.job.sha, tagged);
  assert.equal(fake.requestsFor(tagged).length, 1);
  assert.equal(fake.requestsFor(tagObject).length, 0);
});
