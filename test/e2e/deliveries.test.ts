import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';
import { giteaPush } from '../forge/fixtures/gitea.ts';
import { githubPullRequest, githubPush } from '../forge/fixtures/github.ts';
import { assertError, assertUnauthorized } from './assertions.ts';
import {
  claimTask,
  countRows,
  createWorker,
  deliverRunning,
  getJob,
  heartbeat,
  type Json,
  putSecret,
  sendWebhook,
  startE2E,
  waitForJob,
} from './calls.ts';
import { pipeline, sha } from './payloads.ts';

const { fake, stack, addProject } = await startE2E(import.meta.filename);

test('a repeated GitHub delivery answers 200 with the same job and duplicate: true, and creates nothing', async () => {
  const repo = 'acme/dupes';
  const { secret } = await addProject({ forge: 'github', id: 'dupes', repo });
  const commit = sha('dupes');
  fake.setFile(repo, commit, pipeline('dupes', '  a:\n    script: [make]\n'));
  const delivery = randomUUID();
  const payload = githubPush(repo, commit);

  const first = await sendWebhook(stack, 'github', 'push', payload, { secret, delivery });
  assert.equal(first.status, 202, first.text);
  assert.deepEqual(Object.keys(first.body).sort(), ['job_id', 'number']);
  await waitForJob(stack, first.body.job_id);
  const jobs = await countRows(stack, 'jobs');
  const tasks = await countRows(stack, 'tasks');

  const again = await sendWebhook(stack, 'github', 'push', payload, { secret, delivery });
  assert.equal(again.status, 200, again.text);
  assert.deepEqual(again.body, {
    job_id: first.body.job_id,
    number: first.body.number,
    duplicate: true,
  });
  assert.equal(await countRows(stack, 'jobs'), jobs);
  assert.equal(await countRows(stack, 'tasks'), tasks);
  const view = await getJob(stack, first.body.job_id);
  assert.equal(view.job.state, 'running', 'the duplicate does not touch the job');
  assert.equal(fake.requestsFor(commit).length, 1, 'the duplicate is not compiled again');

  // The same body under a new delivery id is a replay, answered the same way.
  const replayed = await sendWebhook(stack, 'github', 'push', payload, { secret });
  assert.equal(replayed.status, 200, replayed.text);
  assert.equal(replayed.body.job_id, first.body.job_id);
  assert.equal(replayed.body.duplicate, true);
});

test('the same delivery arriving several times at once makes one job', async () => {
  const repo = 'acme/dupes-gitea';
  const { secret } = await addProject({
    forge: 'gitea',
    id: 'dupes-gitea',
    name: 'dupes gitea',
    repo,
  });
  const commit = sha('dupes-gitea');
  fake.setFile(repo, commit, pipeline('dupes-gitea', '  a:\n    script: [make]\n'));
  const jobs = await countRows(stack, 'jobs');
  const delivery = randomUUID();
  const answers = await Promise.all(
    Array.from({ length: 6 }, () =>
      sendWebhook(stack, 'gitea', 'push', giteaPush(repo, commit), { secret, delivery }),
    ),
  );
  const statuses = answers.map((a) => a.status).sort();
  assert.deepEqual(statuses, [200, 200, 200, 200, 200, 202], answers.map((a) => a.text).join('\n'));
  assert.equal(new Set(answers.map((a) => a.body.job_id)).size, 1);
  assert.equal(await countRows(stack, 'jobs'), jobs + 1);
  for (const dup of answers.filter((a) => a.status === 200)) assert.equal(dup.body.duplicate, true);
  // The compile runs after the webhook answered: let it finish here, or its
  // tasks land in the next test's row counts.
  await waitForJob(stack, answers[0]!.body.job_id);
});

test('a forged signature writes nothing; after a rotation the old secret is refused and the new one works', async () => {
  const repo = 'acme/forged';
  const { project, secret } = await addProject({ forge: 'github', id: 'forged', repo });
  const commit = sha('forged');
  fake.setFile(repo, commit, pipeline('forged', '  a:\n    script: [make]\n'));
  const tables = ['jobs', 'tasks', 'task_attempts', 'log_chunks'];
  const before = await Promise.all(tables.map((t) => countRows(stack, t)));
  const forged = await sendWebhook(stack, 'github', 'push', githubPush(repo, commit), {
    secret: `${secret}x`,
  });
  assertUnauthorized(forged);
  assert.deepEqual(await Promise.all(tables.map((t) => countRows(stack, t))), before);
  assert.equal(fake.requestsFor(commit).length, 0, 'nothing was compiled');

  const rotated = await stack.call('POST', `/v1/projects/${project.id}/webhook-secret`, {
    token: stack.adminToken,
  });
  assert.equal(rotated.status, 200, rotated.text);
  const fresh: string = rotated.body.webhook_secret;
  assert.equal(typeof fresh, 'string');
  assert.notEqual(fresh, secret);

  assertUnauthorized(
    await sendWebhook(stack, 'github', 'push', githubPush(repo, commit), { secret }),
  );
  assert.deepEqual(await Promise.all(tables.map((t) => countRows(stack, t))), before);
  const accepted = await sendWebhook(stack, 'github', 'push', githubPush(repo, commit), {
    secret: fresh,
  });
  assert.equal(accepted.status, 202, accepted.text);
  await waitForJob(stack, accepted.body.job_id);

  // The secret shows nowhere else.
  const shown = await stack.call('GET', `/v1/projects/${project.id}`, { token: stack.adminToken });
  assert.ok(!shown.text.includes(fresh));
  assertError(
    await stack.call('POST', '/v1/projects/no-such-project/webhook-secret', {
      token: stack.adminToken,
    }),
    404,
    'not_found',
  );
});

test('a fork pull request runs untrusted, without secrets or token; a same-repo one gets them; closing cancels', async () => {
  const repo = 'acme/pulls';
  const label = 'pulls';
  const { project, secret } = await addProject({
    forge: 'github',
    id: 'pulls',
    repo,
    forge_token: 'ghp_pulls-token',
    fork_pull_requests: 'run',
  });
  await putSecret(stack, project.id, 'API_KEY', 'api-key-value');
  const { token } = await createWorker(stack, [label]);
  const { token: forkRunner } = await createWorker(stack, [label], 'pulls-untrusted', {
    untrusted: true,
  });
  const yml = pipeline(
    label,
    '  check:\n    secrets: [API_KEY]\n    script: [make check]\n  after:\n    needs: [check]\n    script: [make after]\n',
  );
  const forkHead = sha('fork-head');
  const ownHead = sha('own-head');
  fake.setFile(repo, forkHead, yml);
  fake.setFile(repo, ownHead, yml);

  const { hook: fork, view: forkJob } = await deliverRunning(
    stack,
    'github',
    'pull_request',
    githubPullRequest('opened', { repo, number: 7, headSha: forkHead, headRepo: 'mallory/pulls' }),
    secret,
  );
  assert.equal(forkJob.job.trusted, false);
  assert.equal(forkJob.job.trigger, 'pull_request');
  assert.equal(forkJob.job.ref, 'refs/pull/7/head');
  assert.equal(forkJob.job.sha, forkHead);

  const forkTask = await claimTask(stack, forkRunner);
  assert.equal(forkTask.job_id, fork.body.job_id);
  assert.deepEqual(forkTask.secrets, {}, 'an untrusted job gets no secret values');
  assert.deepEqual(forkTask.repo, {
    url: `https://github.com/${repo}.git`,
    sha: forkHead,
    ref: 'refs/pull/7/head',
  });
  assert.ok(!('token' in forkTask.repo), 'an untrusted job gets no forge token');

  const own = await sendWebhook(
    stack,
    'github',
    'pull_request',
    githubPullRequest('synchronize', { repo, number: 8, headSha: ownHead }),
    { secret },
  );
  assert.equal(own.status, 202, own.text);
  const ownJob = await waitForJob(stack, own.body.job_id);
  assert.equal(ownJob.job.trusted, true);
  assert.equal(ownJob.job.ref, 'refs/pull/8/head');
  const ownTask = await claimTask(stack, token);
  assert.equal(ownTask.job_id, own.body.job_id);
  assert.deepEqual(ownTask.secrets, { API_KEY: 'api-key-value' });
  assert.equal(ownTask.repo.token, 'ghp_pulls-token');
  assert.equal(ownTask.repo.ref, 'refs/pull/8/head');

  // Closing #7 cancels its unfinished job and leaves #8 alone.
  const closed = await sendWebhook(
    stack,
    'github',
    'pull_request',
    githubPullRequest('closed', { repo, number: 7, headSha: forkHead, headRepo: 'mallory/pulls' }),
    { secret },
  );
  assert.equal(closed.status, 200, closed.text);
  assert.equal(typeof closed.body.ignored, 'string');
  const cancelled = await getJob(stack, fork.body.job_id);
  assert.equal(cancelled.job.state, 'cancelled');
  assert.notEqual(cancelled.job.finished_at, null);
  assert.equal(cancelled.tasks.find((t: Json) => t.name === 'after').state, 'cancelled');
  const beat = await heartbeat(stack, forkRunner, forkTask.id, forkTask.lease_id);
  assert.equal(beat.status, 200, beat.text);
  assert.equal(beat.body.cancel, true, 'the runner of the closed pull request is told to stop');
  assert.equal((await getJob(stack, own.body.job_id)).job.state, 'running');
  const ownBeat = await heartbeat(stack, token, ownTask.id, ownTask.lease_id);
  assert.equal(ownBeat.body.cancel, false);
});

test('a pull request from a deleted fork (head.repo null) is untrusted', async () => {
  const repo = 'acme/orphans';
  const { secret } = await addProject({
    forge: 'github',
    id: 'orphans',
    repo,
    forge_token: 'ghp_orphans',
    fork_pull_requests: 'run',
  });
  const head = sha('orphan-head');
  fake.setFile(repo, head, pipeline('orphans', '  a:\n    script: [make]\n'));
  const res = await sendWebhook(
    stack,
    'github',
    'pull_request',
    githubPullRequest('reopened', { repo, number: 3, headSha: head, headRepo: null }),
    { secret },
  );
  assert.equal(res.status, 202, res.text);
  const view = await waitForJob(stack, res.body.job_id);
  assert.equal(view.job.trusted, false);
  const { token } = await createWorker(stack, ['orphans'], 'orphans', { untrusted: true });
  const task = await claimTask(stack, token);
  assert.ok(!('token' in task.repo));
});

test('a pull request action that builds nothing (labeled) answers 200 {ignored} and writes nothing', async () => {
  const repo = 'acme/labels';
  const { secret } = await addProject({ forge: 'github', id: 'labels', repo });
  const jobs = await countRows(stack, 'jobs');
  const res = await sendWebhook(
    stack,
    'github',
    'pull_request',
    githubPullRequest('labeled', { repo, number: 4, headSha: sha('labeled') }),
    { secret },
  );
  assert.equal(res.status, 200, res.text);
  assert.equal(typeof res.body.ignored, 'string');
  assert.equal(await countRows(stack, 'jobs'), jobs);
});

test('a new push to a branch cancels the unfinished job of the push before it', async () => {
  const repo = 'acme/superseded';
  const { secret } = await addProject({ forge: 'github', id: 'superseded', repo });
  const [one, two] = [sha('superseded-1'), sha('superseded-2')];
  for (const commit of [one, two]) {
    fake.setFile(repo, commit, pipeline('superseded', '  a:\n    script: [make]\n'));
  }
  const first = await sendWebhook(stack, 'github', 'push', githubPush(repo, one), { secret });
  await waitForJob(stack, first.body.job_id);
  const second = await sendWebhook(stack, 'github', 'push', githubPush(repo, two), { secret });
  assert.equal(second.status, 202, second.text);
  const older = await getJob(stack, first.body.job_id);
  assert.equal(older.job.state, 'cancelled');
  assert.match(older.job.error ?? '', /superseded/);
  const newer = await waitForJob(stack, second.body.job_id);
  assert.equal(newer.job.state, 'running');
});

test("a GitHub App's delivery where no app is configured is refused 404, naming the settings", async () => {
  const res = await sendWebhook(
    stack,
    'github',
    'push',
    { ...githubPush('acme/app-less', sha('app-less')), installation: { id: 31337 } },
    { secret: 'whatever' },
  );
  assert.equal(res.status, 404, res.text);
  assert.match(res.body.error.message, /installation 31337.*CONDUCTOR_GITHUB_APP_ID/);
});
