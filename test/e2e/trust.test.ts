// Untrusted code never reaches a credential (issue #13), through the local
// HTTP server: fork pull requests wait for approval and then run only on
// untrusted workers without secrets or the repository token, trusted work
// never reaches those workers, Gitea pull requests from the repository itself
// are trusted only when Gitea confirms the people behind them may write, a
// replayed body is a duplicate, and reruns keep the trust of the job they
// repeat.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runSweep } from '../../lib/app/sweep.ts';
import { giteaPullRequest } from '../forge/fixtures/gitea.ts';
import { githubPullRequest, githubPush } from '../forge/fixtures/github.ts';
import { startFakeForge } from '../helpers/fake-forge.ts';
import { assertBadRequest, assertError } from './assertions.ts';
import {
  claim,
  claimTask,
  complete,
  countRows,
  deliverRunning,
  getJob,
  type Json,
  putSecret,
  sendWebhook,
  startE2E,
  twoPools,
  waitForJob,
} from './calls.ts';
import { pipeline, sha } from './payloads.ts';

const { fake, stack, addProject } = await startE2E(import.meta.filename);

function approve(jobId: string) {
  return stack.call('POST', `/v1/jobs/${jobId}/approve`, { token: stack.adminToken });
}

/** A Gitea pull request from the base repository (the AGit flow) sent by `sender`, written by `author`. */
function agitPullRequest(
  repo: string,
  opts: { number: number; headSha: string; sender: string; author?: string; action?: string },
) {
  const payload: Json = giteaPullRequest(opts.action ?? 'opened', {
    repo,
    number: opts.number,
    headSha: opts.headSha,
  });
  payload.pull_request.head.ref = `refs/for/main/topic-${opts.number}`;
  for (const [user, login] of [
    [payload.sender, opts.sender],
    [payload.pull_request.user, opts.author ?? opts.sender],
  ]) {
    user.login = login;
    user.username = login;
  }
  return payload;
}

test('a fork pull request waits blocked, unread; approved, it runs on the untrusted worker only, without secrets or token', async () => {
  const repo = 'acme/forked';
  const label = 'forked';
  const { project, secret } = await addProject({
    forge: 'github',
    id: 'forked',
    repo,
    forge_token: 'ghp_forked-token',
  });
  assert.equal(project.fork_pull_requests, 'approve', 'approval is the default');
  assert.equal(project.visibility, 'private');
  await putSecret(stack, project.id, 'API_KEY', 'forked-api-key');
  const workers = await twoPools(stack, label);
  const head = sha('forked-head');
  fake.setFile(
    repo,
    head,
    pipeline(label, '  check:\n    secrets: [API_KEY]\n    script: [make check]\n'),
  );

  const hook = await sendWebhook(
    stack,
    'github',
    'pull_request',
    githubPullRequest('opened', { repo, number: 7, headSha: head, headRepo: 'mallory/forked' }),
    { secret },
  );
  assert.equal(hook.status, 202, hook.text);
  const jobId: string = hook.body.job_id;
  const blocked = await getJob(stack, jobId);
  assert.equal(blocked.job.state, 'blocked');
  assert.equal(blocked.job.trusted, false);
  assert.equal(blocked.job.trust_reason, 'a pull request from a fork');
  assert.deepEqual(blocked.tasks, []);
  assert.equal(fake.requestsFor(head).length, 0, 'the pipeline file is not read before approval');

  // Nothing is claimable, and the sweep leaves the compile alone.
  assert.equal((await claim(stack, workers.untrusted)).status, 204);
  const summary = await runSweep(stack.context, { compileStaleS: 0 });
  assert.equal(summary.compiles_redispatched, 0);
  assert.equal(fake.requestsFor(head).length, 0);
  assert.equal((await getJob(stack, jobId)).job.state, 'blocked');

  const approved = await approve(jobId);
  assert.equal(approved.status, 200, approved.text);
  assert.equal(approved.body.job.id, jobId);
  assert.equal(approved.body.job.state, 'pending');
  assert.equal(approved.body.job.trusted, false, 'approval never grants trust');
  assert.equal(typeof approved.body.job.approved_at, 'string');

  const running = await waitForJob(stack, jobId);
  assert.equal(running.job.state, 'running', JSON.stringify(running.job));
  assert.equal(running.job.trusted, false);
  assert.equal(fake.requestsFor(head).length, 1, 'read once, after the approval');

  assert.equal(
    (await claim(stack, workers.trusted)).status,
    204,
    'a trusted worker never takes it',
  );
  const task = await claimTask(stack, workers.untrusted);
  assert.equal(task.job_id, jobId);
  assert.deepEqual(task.secrets, {});
  assert.deepEqual(task.repo, {
    url: `https://github.com/${repo}.git`,
    sha: head,
    ref: 'refs/pull/7/head',
  });
  assert.ok(!('token' in task.repo));
});

test('a trusted push never reaches the untrusted worker', async () => {
  const repo = 'acme/pushed';
  const label = 'pushed';
  const { project, secret } = await addProject({
    forge: 'github',
    id: 'pushed',
    repo,
    forge_token: 'ghp_pushed-token',
  });
  await putSecret(stack, project.id, 'DEPLOY', 'pushed-deploy');
  const workers = await twoPools(stack, label);
  const commit = sha('pushed');
  fake.setFile(
    repo,
    commit,
    pipeline(label, '  ship:\n    secrets: [DEPLOY]\n    script: [make]\n'),
  );
  const { hook, view } = await deliverRunning(
    stack,
    'github',
    'push',
    githubPush(repo, commit),
    secret,
  );
  assert.equal(view.job.trusted, true);
  assert.equal(view.tasks[0].queue_reason, null, 'a trusted worker with the label is registered');

  assert.equal((await claim(stack, workers.untrusted)).status, 204);
  assert.equal((await claim(stack, workers.untrusted, { labels: [label] })).status, 204);
  const task = await claimTask(stack, workers.trusted);
  assert.equal(task.job_id, hook.body.job_id);
  assert.deepEqual(task.secrets, { DEPLOY: 'pushed-deploy' });
  assert.equal(task.repo.token, 'ghp_pushed-token');
});

test('a Gitea pull request from the repository itself is trusted when Gitea confirms the sender may write, and blocked when not', async () => {
  const repo = 'harbor/agit';
  const label = 'agit';
  const { project, secret } = await addProject({
    forge: 'gitea',
    id: 'agit',
    repo,
    forge_token: 'gitea-agit-token',
  });
  await putSecret(stack, project.id, 'API_KEY', 'agit-api-key');
  const workers = await twoPools(stack, label);
  fake.setPermission(repo, 'ines', 'write');
  fake.setPermission(repo, 'mallory', 'read');
  const yml = pipeline(label, '  check:\n    secrets: [API_KEY]\n    script: [make]\n');
  const [writer, reader, reopened] = [sha('agit-w'), sha('agit-r'), sha('agit-o')];
  for (const head of [writer, reader, reopened]) fake.setFile(repo, head, yml);
  const asked = (login: string) =>
    fake.requests.filter(
      (r) => r.path === `/api/v1/repos/${repo}/collaborators/${login}/permission`,
    );

  const { view: confirmed } = await deliverRunning(
    stack,
    'gitea',
    'pull_request',
    agitPullRequest(repo, { number: 1, headSha: writer, sender: 'ines' }),
    secret,
  );
  assert.equal(confirmed.job.trusted, true);
  assert.equal(confirmed.job.trust_reason, `Gitea confirmed that ines may write to ${repo}`);
  assert.equal(asked('ines').length, 1);
  assert.equal(asked('ines')[0]!.headers.authorization, 'token gitea-agit-token');
  assert.equal((await claim(stack, workers.untrusted)).status, 204);
  const task = await claimTask(stack, workers.trusted);
  assert.deepEqual(task.secrets, { API_KEY: 'agit-api-key' });
  assert.equal(task.repo.token, 'gitea-agit-token');

  const denied = await sendWebhook(
    stack,
    'gitea',
    'pull_request',
    agitPullRequest(repo, { number: 2, headSha: reader, sender: 'mallory' }),
    { secret },
  );
  assert.equal(denied.status, 202, denied.text);
  const blocked = await waitForJob(stack, denied.body.job_id);
  assert.equal(blocked.job.state, 'blocked');
  assert.equal(blocked.job.trusted, false);
  assert.match(blocked.job.trust_reason, /mallory has "read" permission/);
  assert.equal(asked('mallory').length, 1);
  assert.equal(fake.requestsFor(reader).length, 0, 'the pipeline file is not read');

  // A writer reopening a reader's pull request does not make the reader's code trusted.
  const mixed = await sendWebhook(
    stack,
    'gitea',
    'pull_request',
    agitPullRequest(repo, {
      number: 3,
      headSha: reopened,
      sender: 'ines',
      author: 'mallory',
      action: 'reopened',
    }),
    { secret },
  );
  assert.equal(mixed.status, 202, mixed.text);
  const held = await waitForJob(stack, mixed.body.job_id);
  assert.equal(held.job.state, 'blocked');
  assert.equal(held.job.trusted, false);

  // Approved, the reader's job runs untrusted, and Gitea is not asked again.
  assert.equal((await approve(denied.body.job_id)).status, 200);
  const running = await waitForJob(stack, denied.body.job_id, (v) => v.job.state === 'running');
  assert.equal(running.job.trusted, false);
  assert.equal(asked('mallory').length, 2, 'once for each of the two pull requests');
  assert.equal((await claim(stack, workers.trusted)).status, 204);
  const untrustedTask = await claimTask(stack, workers.untrusted);
  assert.equal(untrustedTask.job_id, denied.body.job_id);
  assert.deepEqual(untrustedTask.secrets, {});
  assert.ok(!('token' in untrustedTask.repo));
});

test('without a forge token every Gitea pull request is untrusted, and Gitea is not asked', async () => {
  const repo = 'harbor/tokenless';
  const { secret } = await addProject({ forge: 'gitea', id: 'tokenless', repo });
  fake.setPermission(repo, 'ines', 'admin');
  const head = sha('tokenless');
  fake.setFile(repo, head, pipeline('tokenless', '  a:\n    script: [make]\n'));
  const res = await sendWebhook(
    stack,
    'gitea',
    'pull_request',
    agitPullRequest(repo, { number: 4, headSha: head, sender: 'ines' }),
    { secret },
  );
  assert.equal(res.status, 202, res.text);
  const view = await getJob(stack, res.body.job_id);
  assert.equal(view.job.state, 'blocked');
  assert.equal(view.job.trusted, false);
  assert.match(view.job.trust_reason, /without a forge token/);
  assert.equal(
    fake.requests.filter((r) => r.path.startsWith(`/api/v1/repos/${repo}/collaborators/`)).length,
    0,
  );
});

test('a Gitea permission API that refuses the token (403) leaves the pull request untrusted', async () => {
  const repo = 'harbor/refused';
  const { secret } = await addProject({
    forge: 'gitea',
    id: 'refused',
    repo,
    forge_token: 'gitea-readonly-token',
    fork_pull_requests: 'run',
  });
  fake.setPermission(repo, 'ines', 403);
  const head = sha('refused');
  fake.setFile(repo, head, pipeline('refused', '  a:\n    script: [make]\n'));
  const { view } = await deliverRunning(
    stack,
    'gitea',
    'pull_request',
    agitPullRequest(repo, { number: 5, headSha: head, sender: 'ines' }),
    secret,
  );
  assert.equal(view.job.trusted, false, "'run' runs it at once, untrusted");
  assert.match(view.job.trust_reason, /HTTP 403/);
});

test('the commit status of a blocked job says "waiting for approval"', async () => {
  const forge = await startFakeForge({ statuses: true });
  const repo = 'harbor/status';
  const { secret } = await addProject({
    forge: 'gitea',
    id: 'status',
    repo,
    forge_url: forge.url,
    forge_token: 'gitea-status-token',
  });
  const head = sha('status-head');
  const res = await sendWebhook(
    stack,
    'gitea',
    'pull_request',
    giteaPullRequest('opened', { repo, number: 9, headSha: head, headRepo: 'mallory/status' }),
    { secret },
  );
  assert.equal(res.status, 202, res.text);
  const [posted] = await forge.waitForStatuses(head, 1);
  assert.equal(posted!.body.state, 'pending');
  assert.equal(posted!.body.description, 'waiting for approval');
});

test('a replayed body under a new delivery id is a duplicate: nothing written, the running job not cancelled', async () => {
  const repo = 'acme/replayed';
  const { secret } = await addProject({
    forge: 'github',
    id: 'replayed',
    repo,
    forge_token: 'ghp_replayed',
  });
  const commit = sha('replayed');
  fake.setFile(repo, commit, pipeline('replayed', '  a:\n    script: [make]\n'));
  const raw = JSON.stringify(githubPush(repo, commit));
  const { hook } = await deliverRunning(stack, 'github', 'push', JSON.parse(raw), secret);
  const tables = ['jobs', 'tasks', 'status_outbox', 'task_attempts'];
  const before = await Promise.all(tables.map((t) => countRows(stack, t)));
  const counter = () =>
    stack.context.pool.query("select job_counter from projects where id = 'replayed'");
  const numbered = (await counter()).rows[0].job_counter;

  const replay = await sendWebhook(stack, 'github', 'push', null, { secret, raw });
  assert.equal(replay.status, 200, replay.text);
  assert.deepEqual(replay.body, {
    job_id: hook.body.job_id,
    number: hook.body.number,
    duplicate: true,
  });
  assert.deepEqual(await Promise.all(tables.map((t) => countRows(stack, t))), before);
  assert.equal((await counter()).rows[0].job_counter, numbered, 'no job number taken');
  assert.equal((await getJob(stack, hook.body.job_id)).job.state, 'running');
  assert.equal(fake.requestsFor(commit).length, 1, 'not compiled again');

  // The same push with one byte changed is another body: a new job, which supersedes.
  const changed = await sendWebhook(stack, 'github', 'push', null, { secret, raw: `${raw} ` });
  assert.equal(changed.status, 202, changed.text);
  assert.equal((await getJob(stack, hook.body.job_id)).job.state, 'cancelled');
});

test('a rerun of an untrusted job is untrusted', async () => {
  const repo = 'acme/rerun-fork';
  const label = 'rerun-fork';
  const { project, secret } = await addProject({
    forge: 'github',
    id: 'rerun-fork',
    repo,
    forge_token: 'ghp_rerun',
    fork_pull_requests: 'run',
  });
  await putSecret(stack, project.id, 'API_KEY', 'rerun-key');
  const workers = await twoPools(stack, label);
  const head = sha('rerun-fork');
  fake.setFile(repo, head, pipeline(label, '  a:\n    secrets: [API_KEY]\n    script: [make]\n'));
  const { hook, view } = await deliverRunning(
    stack,
    'github',
    'pull_request',
    githubPullRequest('opened', { repo, number: 11, headSha: head, headRepo: 'eve/x' }),
    secret,
  );
  assert.equal(view.job.trusted, false);
  const first = await claimTask(stack, workers.untrusted);
  const done = await complete(stack, workers.untrusted, first.id, {
    lease_id: first.lease_id,
    outcome: 'failed',
    exit_code: 1,
  });
  assert.equal(done.body.job_state, 'failed', done.text);

  const rerun = await stack.call('POST', `/v1/jobs/${hook.body.job_id}/rerun`, {
    token: stack.adminToken,
    body: {},
  });
  assert.equal(rerun.status, 202, rerun.text);
  const again = await waitForJob(stack, rerun.body.job_id);
  assert.equal(again.job.trigger, 'rerun');
  assert.equal(again.job.trusted, false);
  assert.equal((await claim(stack, workers.trusted)).status, 204);
  const task = await claimTask(stack, workers.untrusted);
  assert.equal(task.job_id, rerun.body.job_id);
  assert.deepEqual(task.secrets, {});
  assert.ok(!('token' in task.repo));
});

test('approve answers 409 unless the job is blocked, 404 for no such job; cancel declines a blocked job', async () => {
  const repo = 'acme/declined';
  const { secret } = await addProject({ forge: 'github', id: 'declined', repo });
  const commit = sha('declined-push');
  fake.setFile(repo, commit, pipeline('declined', '  a:\n    script: [make]\n'));
  const { hook: push } = await deliverRunning(
    stack,
    'github',
    'push',
    githubPush(repo, commit),
    secret,
  );
  assertError(await approve(push.body.job_id), 409, 'conflict');
  assertError(await approve('00000000-0000-4000-8000-000000000000'), 404, 'not_found');

  const fork = await sendWebhook(
    stack,
    'github',
    'pull_request',
    githubPullRequest('opened', {
      repo,
      number: 2,
      headSha: sha('declined-fork'),
      headRepo: 'mallory/declined',
    }),
    { secret },
  );
  assert.equal(fork.status, 202, fork.text);
  const cancelled = await stack.call('POST', `/v1/jobs/${fork.body.job_id}/cancel`, {
    token: stack.adminToken,
  });
  assert.equal(cancelled.status, 200, cancelled.text);
  assert.equal(cancelled.body.job.state, 'cancelled');
  assert.equal(cancelled.body.job.error, 'declined: cancelled through the API');
  assert.notEqual(cancelled.body.job.finished_at, null);
  assertError(await approve(fork.body.job_id), 409, 'conflict');
});

test('a new push to a fork pull request supersedes its blocked job; closing it cancels the newer one', async () => {
  const repo = 'acme/fork-updates';
  const { secret } = await addProject({ forge: 'github', id: 'fork-updates', repo });
  const send = (action: string, head: string) =>
    sendWebhook(
      stack,
      'github',
      'pull_request',
      githubPullRequest(action, { repo, number: 3, headSha: head, headRepo: 'eve/fork-updates' }),
      { secret },
    );
  const first = await send('opened', sha('fork-updates-1'));
  const second = await send('synchronize', sha('fork-updates-2'));
  assert.equal(second.status, 202, second.text);
  const older = await getJob(stack, first.body.job_id);
  assert.equal(older.job.state, 'cancelled');
  assert.equal(older.job.error, `declined: superseded by job #${second.body.number}`);
  assert.equal((await getJob(stack, second.body.job_id)).job.state, 'blocked');

  const closed = await send('closed', sha('fork-updates-2'));
  assert.equal(closed.status, 200, closed.text);
  assert.equal(closed.body.cancelled, 1);
  assert.equal((await getJob(stack, second.body.job_id)).job.state, 'cancelled');
});

test("fork_pull_requests 'ignore' answers 200 {ignored} and writes nothing; 'run' runs the fork at once", async () => {
  const repo = 'acme/policies';
  const { project, secret } = await addProject({
    forge: 'github',
    id: 'policies',
    repo,
    fork_pull_requests: 'ignore',
  });
  assert.equal(project.fork_pull_requests, 'ignore');
  const head = sha('policies-fork');
  fake.setFile(repo, head, pipeline('policies', '  a:\n    script: [make]\n'));
  const fork = (number: number) =>
    githubPullRequest('opened', { repo, number, headSha: head, headRepo: 'eve/policies' });
  const jobs = await countRows(stack, 'jobs');
  const ignored = await sendWebhook(stack, 'github', 'pull_request', fork(1), { secret });
  assert.equal(ignored.status, 200, ignored.text);
  assert.match(ignored.body.ignored, /fork_pull_requests is ignore/);
  assert.equal(await countRows(stack, 'jobs'), jobs);
  assert.equal(fake.requestsFor(head).length, 0);

  // A pull request from a branch of the repository is not affected.
  const own = sha('policies-own');
  fake.setFile(repo, own, pipeline('policies', '  a:\n    script: [make]\n'));
  const { view: ownJob } = await deliverRunning(
    stack,
    'github',
    'pull_request',
    githubPullRequest('opened', { repo, number: 2, headSha: own }),
    secret,
  );
  assert.equal(ownJob.job.trusted, true);

  const patched = await stack.call('PATCH', `/v1/projects/${project.id}`, {
    token: stack.adminToken,
    body: { fork_pull_requests: 'run', visibility: 'public' },
  });
  assert.equal(patched.status, 200, patched.text);
  assert.equal(patched.body.project.fork_pull_requests, 'run');
  assert.equal(patched.body.project.visibility, 'public');
  const { view } = await deliverRunning(stack, 'github', 'pull_request', fork(3), secret);
  assert.equal(view.job.trusted, false);
  assert.equal(view.job.approved_at, null);
});

test('bad trust settings are 400s naming the field', async () => {
  const bad = await stack.call('POST', '/v1/projects', {
    token: stack.adminToken,
    body: {
      id: 'bad-policy',
      name: 'bad',
      forge: 'github',
      repo: 'acme/bad-policy',
      repo_url: 'https://github.com/acme/bad-policy.git',
      fork_pull_requests: 'always',
    },
  });
  assertBadRequest(bad, 'fork_pull_requests');
  const { project } = await addProject({ forge: 'github', id: 'good-policy', repo: 'acme/good' });
  assertBadRequest(
    await stack.call('PATCH', `/v1/projects/${project.id}`, {
      token: stack.adminToken,
      body: { visibility: 'everyone' },
    }),
    'visibility',
  );
  assertBadRequest(
    await stack.call('POST', '/v1/workers', {
      token: stack.adminToken,
      body: { name: 'w', labels: [], untrusted: 'yes' },
    }),
    'untrusted',
  );
  const listed = await stack.call('GET', '/v1/workers', { token: stack.adminToken });
  assert.ok(listed.body.workers.every((w: Json) => typeof w.untrusted === 'boolean'));
});
