// A bot's code is a stranger's code (issue #28): a dependency's new release arrives as a
// pull request Dependabot or Renovate opens from a branch of the repository itself, after a
// push of that branch. Both are untrusted unless the project's bot_pull_requests is
// `trusted`: they wait for approval (fork_pull_requests) and then run only on untrusted
// workers, without secrets or the repository token. Through the local HTTP server.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runCtl } from '../../cli/ctl.ts';
import { BOT_PULL_REQUEST_POLICIES } from '../../lib/states.ts';
import {
  giteaPullRequest,
  giteaRenovatePullRequest,
  giteaRenovatePush,
} from '../forge/fixtures/gitea.ts';
import {
  githubDependabotPullRequest,
  githubDependabotPush,
  githubPullRequest,
} from '../forge/fixtures/github.ts';
import { assertBadRequest } from './assertions.ts';
import {
  claim,
  claimTask,
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

/** A project on `forge` with a forge token, a secret, and both pools of workers for its label. */
async function botProject(forge: 'github' | 'gitea', id: string, settings: Json = {}) {
  const repo = `${forge === 'github' ? 'acme' : 'harbor'}/${id}`;
  const { project, secret } = await addProject({
    forge,
    id,
    repo,
    forge_token: `${forge}-${id}-token`,
    ...settings,
  });
  await putSecret(stack, id, 'NPM_TOKEN', `${id}-npm-token`);
  const workers = await twoPools(stack, id);
  const commit = (seed: string) => {
    const head = sha(`${id}-${seed}`);
    fake.setFile(
      repo,
      head,
      pipeline(id, '  install:\n    secrets: [NPM_TOKEN]\n    script: [npm ci]\n'),
    );
    return head;
  };
  return { project, repo, secret, workers, commit };
}

async function deliver(forge: 'github' | 'gitea', event: string, payload: unknown, secret: string) {
  const hook = await sendWebhook(stack, forge, event, payload, { secret });
  assert.equal(hook.status, 202, hook.text);
  return hook.body.job_id as string;
}

/** Asserts the job is blocked and untrusted, its pipeline file unread, and answers it. */
async function assertBlocked(jobId: string, head: string, reason: RegExp) {
  const { job, tasks } = await getJob(stack, jobId);
  assert.equal(job.state, 'blocked');
  assert.equal(job.trusted, false);
  assert.match(job.trust_reason, reason);
  assert.deepEqual(tasks, []);
  assert.equal(fake.requestsFor(head).length, 0, 'the pipeline file is not read before approval');
  return job;
}

test('a Dependabot pull request from a branch of the repository waits for approval, then runs on the untrusted worker without secrets or token; with bot_pull_requests trusted it runs trusted', async () => {
  const p = await botProject('github', 'deps');
  assert.equal(p.project.bot_pull_requests, 'untrusted', 'untrusted is the default');

  const head = p.commit('bump');
  const jobId = await deliver(
    'github',
    'pull_request',
    githubDependabotPullRequest('opened', { repo: p.repo, number: 21, headSha: head }),
    p.secret,
  );
  await assertBlocked(
    jobId,
    head,
    /^a pull request of the bot dependabot\[bot\] \(the project's bot_pull_requests is untrusted\)$/,
  );
  const approved = await stack.call('POST', `/v1/jobs/${jobId}/approve`, {
    token: stack.adminToken,
  });
  assert.equal(approved.status, 200, approved.text);
  await waitForJob(stack, jobId, (v) => v.job.state === 'running');
  assert.equal((await claim(stack, p.workers.trusted)).status, 204, 'never a trusted worker');
  const task = await claimTask(stack, p.workers.untrusted);
  assert.equal(task.job_id, jobId);
  assert.equal(task.trusted, false);
  assert.deepEqual(task.secrets, {});
  assert.ok(!('token' in task.repo), 'no repository token');

  const patched = await stack.call('PATCH', '/v1/projects/deps', {
    token: stack.adminToken,
    body: { bot_pull_requests: 'trusted' },
  });
  assert.equal(patched.status, 200, patched.text);
  assert.equal(patched.body.project.bot_pull_requests, 'trusted');
  const next = p.commit('bump-2');
  const trustedJob = await deliver(
    'github',
    'pull_request',
    githubDependabotPullRequest('synchronize', { repo: p.repo, number: 21, headSha: next }),
    p.secret,
  );
  const { job } = await waitForJob(stack, trustedJob);
  assert.equal(job.state, 'running');
  assert.equal(job.trusted, true);
  assert.equal(job.trust_reason, 'a pull request from a branch of the repository');
  const trustedTask = await claimTask(stack, p.workers.trusted);
  assert.equal(trustedTask.job_id, trustedJob);
  assert.deepEqual(trustedTask.secrets, { NPM_TOKEN: 'deps-npm-token' });
  assert.equal(trustedTask.repo.token, 'github-deps-token');
});

test("Dependabot's push of its branch waits like its pull request; a person's pull request in the same project is trusted", async () => {
  const p = await botProject('github', 'deps-push');
  const branch = p.commit('branch');
  const jobId = await deliver('github', 'push', githubDependabotPush(p.repo, branch), p.secret);
  await assertBlocked(
    jobId,
    branch,
    /^a push by the bot dependabot\[bot\] to a branch other than the default/,
  );

  const own = p.commit('person');
  const person = await deliver(
    'github',
    'pull_request',
    githubPullRequest('opened', { repo: p.repo, number: 3, headSha: own }),
    p.secret,
  );
  const { job } = await waitForJob(stack, person);
  assert.equal(job.trusted, true);
  assert.equal(job.state, 'running');
});

test("a person reopening a bot's pull request does not make the bot's code trusted", async () => {
  const p = await botProject('github', 'deps-reopen');
  const head = p.commit('reopened');
  const payload = githubDependabotPullRequest('reopened', {
    repo: p.repo,
    number: 8,
    headSha: head,
  });
  payload.sender = githubPullRequest('opened').sender;
  const jobId = await deliver('github', 'pull_request', payload, p.secret);
  await assertBlocked(jobId, head, /dependabot\[bot\]/);
});

test('a Renovate pull request on Gitea waits for approval without Gitea being asked; with bot_pull_requests trusted, Gitea confirms the bot may write and it runs trusted', async () => {
  const p = await botProject('gitea', 'renovated');
  const asked = () =>
    fake.requests.filter((r) => r.path.startsWith(`/api/v1/repos/${p.repo}/collaborators/`));
  fake.setPermission(p.repo, 'renovate-bot', 'write');

  const branch = p.commit('branch');
  const pushed = await deliver('gitea', 'push', giteaRenovatePush(p.repo, branch), p.secret);
  await assertBlocked(pushed, branch, /^a push by the bot renovate-bot /);
  const head = p.commit('update');
  const jobId = await deliver(
    'gitea',
    'pull_request',
    giteaRenovatePullRequest('opened', { repo: p.repo, number: 31, headSha: head }),
    p.secret,
  );
  await assertBlocked(jobId, head, /^a pull request of the bot renovate-bot /);
  assert.equal(asked().length, 0, 'nothing to confirm: the bot is untrusted whatever Gitea says');

  await runCtl(
    ['project', 'update', 'renovated', '--bot-pull-requests', 'trusted', '--url', stack.url],
    { out: () => {}, env: { CONDUCTOR_ADMIN_TOKEN: stack.adminToken } },
  );
  const next = p.commit('update-2');
  const trustedJob = await deliver(
    'gitea',
    'pull_request',
    giteaRenovatePullRequest('synchronized', { repo: p.repo, number: 31, headSha: next }),
    p.secret,
  );
  const { job } = await waitForJob(stack, trustedJob);
  assert.equal(job.state, 'running', JSON.stringify(job));
  assert.equal(job.trusted, true);
  assert.equal(asked().length, 1, 'Gitea was asked about renovate-bot');
  assert.deepEqual((await claimTask(stack, p.workers.trusted)).secrets, {
    NPM_TOKEN: 'renovated-npm-token',
  });
});

test("a project that ignores untrusted pull requests ignores a bot's; a person's branch still builds", async () => {
  const p = await botProject('gitea', 'renovate-ignored', { fork_pull_requests: 'ignore' });
  const head = p.commit('ignored');
  const hook = await sendWebhook(
    stack,
    'gitea',
    'pull_request',
    giteaRenovatePullRequest('opened', { repo: p.repo, number: 2, headSha: head }),
    { secret: p.secret },
  );
  assert.equal(hook.status, 200, hook.text);
  assert.match(hook.body.ignored, /renovate-bot.*fork_pull_requests is ignore/);

  fake.setPermission(p.repo, 'ines', 'write');
  const own = p.commit('person');
  const person = await deliver(
    'gitea',
    'pull_request',
    giteaPullRequest('opened', { repo: p.repo, number: 3, headSha: own }),
    p.secret,
  );
  const { job } = await waitForJob(stack, person);
  assert.equal(job.trusted, true);
});

test('bot_pull_requests is untrusted or trusted in POST and PATCH /v1/projects and through the CLI, anything else a 400 naming it; the database allows the same values', async () => {
  const out: string[] = [];
  const io = { out: (l: string) => out.push(l), env: { CONDUCTOR_ADMIN_TOKEN: stack.adminToken } };
  const created = await runCtl(
    [
      'project',
      'create',
      '--id',
      'bots-cli',
      '--repo',
      'acme/bots-cli',
      '--repo-url',
      'https://github.com/acme/bots-cli.git',
      '--bot-pull-requests',
      'trusted',
      '--url',
      stack.url,
    ],
    io,
  );
  assert.equal(created, 0, out.join('\n'));
  assert.equal(
    (await stack.call('GET', '/v1/projects/bots-cli', { token: stack.adminToken })).body.project
      .bot_pull_requests,
    'trusted',
  );
  out.length = 0;
  const updated = await runCtl(
    [
      'project',
      'update',
      'bots-cli',
      '--bot-pull-requests',
      'untrusted',
      '--url',
      stack.url,
      '--json',
    ],
    io,
  );
  assert.equal(updated, 0, out.join('\n'));
  assert.equal(JSON.parse(out.join('\n')).project.bot_pull_requests, 'untrusted');
  assert.equal(await runCtl(['project', 'update', 'bots-cli', '--url', stack.url], io), 2);

  const bad = await stack.call('POST', '/v1/projects', {
    token: stack.adminToken,
    body: {
      id: 'bots-bad',
      name: 'x',
      forge: 'github',
      repo: 'acme/bots-bad',
      repo_url: 'https://github.com/acme/bots-bad.git',
      bot_pull_requests: 'yes',
    },
  });
  assertBadRequest(bad, 'bot_pull_requests');
  const badPatch = await stack.call('PATCH', '/v1/projects/bots-cli', {
    token: stack.adminToken,
    body: { bot_pull_requests: true },
  });
  assertBadRequest(badPatch, 'bot_pull_requests');

  const { rows } = await stack.context.pool.query<{ def: string }>(
    `select pg_get_constraintdef(oid) as def from pg_constraint
      where conname = 'projects_bot_pull_requests_check'`,
  );
  assert.deepEqual(
    [...(rows[0]?.def ?? '').matchAll(/'([^']*)'::text/g)].map((m) => m[1]),
    [...BOT_PULL_REQUEST_POLICIES],
  );
});
