// The GitHub App (issue #53) driven by octokit's example payloads
// (@octokit/webhooks-examples: GitHub's own deliveries, collected by the
// community) rather than by this project's hand-written fixtures. Each example
// is posted as GitHub delivers it (signed with the app's webhook secret,
// X-GitHub-Event, X-GitHub-Delivery) to POST /v1/webhooks/github. Only what must
// match this test's world is changed: the installation's id, the repositories'
// names and ids, the app's id, the commit and check run of a job this test
// made. Every other field stays as the package has it: real shapes, with the
// fields GitHub leaves out or sends as null.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { WebhookDefinition } from '@octokit/webhooks-examples';
import { installedRepositories } from '../../lib/app/github-app.ts';
import { type FakeGitHubApp, startFakeGitHubApp } from '../helpers/fake-github-app.ts';
import { testStack } from '../helpers/stack.ts';
import { claimTask, complete, createWorker, sendWebhook, waitForJob } from './calls.ts';
import { pipeline, sha } from './payloads.ts';

const fake: FakeGitHubApp = await startFakeGitHubApp();
const stack = await testStack(import.meta.filename, {
  CONDUCTOR_GITHUB_API_URL: fake.url,
  CONDUCTOR_GITHUB_APP_ID: fake.appId,
  CONDUCTOR_GITHUB_APP_PRIVATE_KEY_FILE: fake.keyFile,
  CONDUCTOR_GITHUB_APP_WEBHOOK_SECRET: fake.webhookSecret,
  CONDUCTOR_PUBLIC_URL: 'https://ci.northwind.example',
});
const ctx = stack.context;

// The package is one JSON file (its `main`): every event with its `examples`.
const examples = createRequire(import.meta.url)(
  '@octokit/webhooks-examples',
) as WebhookDefinition[];

// biome-ignore lint/suspicious/noExplicitAny: examples are edited field by field, as JSON
type Json = any;

/** A copy of the package's example of `event` with `action` (the `index`th such). */
function example(event: string, action: string, index = 0): Json {
  const definition = examples.find((d) => d.name === event);
  assert.ok(definition, `@octokit/webhooks-examples has no ${event} examples`);
  const found = (definition.examples as Json[]).filter((e) => e.action === action);
  assert.ok(found[index], `@octokit/webhooks-examples has no ${event} ${action} example #${index}`);
  return structuredClone(found[index]);
}

/** A push example (one with an installation: the app's delivery of a branch push). */
function pushExample(): Json {
  const definition = examples.find((d) => d.name === 'push')!;
  const found = (definition.examples as Json[]).find(
    (e) => e.installation && e.ref.startsWith('refs/heads/') && e.deleted === false,
  );
  assert.ok(found, '@octokit/webhooks-examples has no push of a branch through an app');
  return structuredClone(found);
}

// This test's world: the installation of the package's `installation created`
// example, on the account and repository it names.
const INSTALLATION = 957387;
const OWNER = 'Codertocat';
const REPO = 'Codertocat/Hello-World';
const APP_ID = Number(fake.appId);

/** Points a repository object (of any example) at `full`, keeping its other fields. */
function repoAs(r: Json, full: string, id: number): void {
  r.full_name = full;
  r.name = full.split('/')[1];
  r.id = id;
  if (r.owner) r.owner.login = full.split('/')[0];
}

/** Points an example's installation at this test's, keeping its other fields. */
function installationAs(e: Json): Json {
  e.installation.id = INSTALLATION;
  if (e.installation.account) e.installation.account.login = OWNER;
  if ('app_id' in e.installation) e.installation.app_id = APP_ID;
  return e;
}

function deliver(event: string, payload: unknown) {
  return sendWebhook(stack, 'github', event, payload, { secret: fake.webhookSecret });
}

const listed = async () =>
  (await installedRepositories(ctx))
    .filter((r) => r.installation_id === INSTALLATION)
    .map((r) => `${r.account} ${r.repo}`);

async function jobsOf(project: string): Promise<{ id: string; trigger: string }[]> {
  const res = await stack.call('GET', `/v1/projects/${project}/jobs`, { token: stack.adminToken });
  assert.equal(res.status, 200, res.text);
  return res.body.jobs;
}

async function until<T>(what: string, read: () => T | undefined | false): Promise<T> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const value = read();
    if (value) return value;
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** Claims the job's only task and fails it; waits for the job and its check run to finish. */
async function failJob(runner: string, jobId: string, commit: string) {
  await waitForJob(stack, jobId, (v) => v.job.state === 'running');
  const task = await claimTask(stack, runner);
  const done = await complete(stack, runner, task.id, {
    lease_id: task.lease_id,
    outcome: 'failed',
    exit_code: 1,
  });
  assert.equal(done.status, 200, done.text);
  await waitForJob(stack, jobId, (v) => v.job.state === 'failed');
  return until(`the completed check run of job ${jobId}`, () =>
    fake
      .runsFor(commit)
      .find((r) => r.fields.external_id === jobId && r.fields.status === 'completed'),
  );
}

test("octokit's installation, installation_repositories, push and check_run examples install the app, build, rerun and uninstall", async () => {
  // installation created: the installation and its one repository are recorded.
  const created = installationAs(example('installation', 'created'));
  assert.equal(created.repositories[0].full_name, REPO, 'the example installs Hello-World');
  fake.install(INSTALLATION, [REPO]);
  const installed = await deliver('installation', created);
  assert.equal(installed.status, 200, installed.text);
  assert.deepEqual(installed.body, {
    installation: INSTALLATION,
    action: 'created',
    repositories: 1,
  });
  assert.deepEqual(await listed(), [`${OWNER} ${REPO}`]);

  // installation_repositories added (the example adds Codertocat/Space), then removed.
  const added = installationAs(example('installation_repositories', 'added'));
  assert.deepEqual(
    added.repositories_added.map((r: Json) => r.full_name),
    ['Codertocat/Space'],
  );
  const addedRes = await deliver('installation_repositories', added);
  assert.equal(addedRes.status, 200, addedRes.text);
  assert.deepEqual(addedRes.body, { installation: INSTALLATION, added: 1, removed: 0 });
  assert.deepEqual(await listed(), [`${OWNER} ${REPO}`, `${OWNER} Codertocat/Space`]);

  const removed = installationAs(example('installation_repositories', 'removed'));
  repoAs(removed.repositories_removed[0], 'Codertocat/Space', added.repositories_added[0].id);
  const removedRes = await deliver('installation_repositories', removed);
  assert.equal(removedRes.status, 200, removedRes.text);
  assert.deepEqual(removedRes.body, { installation: INSTALLATION, added: 0, removed: 1 });
  assert.deepEqual(await listed(), [`${OWNER} ${REPO}`]);

  // Who did it, as the examples' senders say.
  const audit = await stack.call('GET', '/v1/audit?limit=20', { token: stack.adminToken });
  const actions = audit.body.events.map(
    (e: { action: string; actor: string }) => `${e.action} ${e.actor}`,
  );
  assert.ok(actions.includes(`github_app.created @${created.sender.login}`), actions.join(', '));
  assert.ok(
    actions.includes(`github_app.repositories @${removed.sender.login}`),
    actions.join(', '),
  );

  // A push of the installed repository (the package's push through an app) makes a job.
  const project = await stack.call('POST', '/v1/projects', {
    token: stack.adminToken,
    body: {
      id: 'hello-world',
      name: 'Hello World',
      forge: 'github',
      repo: REPO,
      repo_url: `https://github.com/${REPO}.git`,
      github_app: true,
    },
  });
  assert.equal(project.status, 201, project.text);
  const { token: runner } = await createWorker(stack, ['octokit-examples']);
  const commit = sha('octokit-examples');
  fake.setFile(REPO, commit, pipeline('octokit-examples', '  only:\n    script: [exit 1]\n'));
  const push = pushExample();
  repoAs(push.repository, REPO, created.repositories[0].id);
  push.installation.id = INSTALLATION;
  push.after = commit;
  const pushed = await deliver('push', push);
  assert.equal(pushed.status, 202, pushed.text);
  const jobId: string = pushed.body.job_id;
  const run = await failJob(runner, jobId, commit);
  assert.equal(run.fields.conclusion, 'failure');

  // check_run rerequested: its sender may write, and the job behind the run is rerun.
  const rerequested = example('check_run', 'rerequested');
  repoAs(rerequested.repository, REPO, created.repositories[0].id);
  rerequested.installation.id = INSTALLATION;
  rerequested.check_run.id = run.id;
  rerequested.check_run.head_sha = commit;
  rerequested.check_run.check_suite.head_sha = commit;
  rerequested.check_run.check_suite.after = commit;
  rerequested.check_run.check_suite.app.id = APP_ID;
  if (rerequested.check_run.app) rerequested.check_run.app.id = APP_ID;
  const rerunBy: string = rerequested.sender.login;
  fake.setPermission(REPO, rerunBy, 'write');
  const rerun = await deliver('check_run', rerequested);
  assert.equal(rerun.status, 202, rerun.text);
  assert.equal(rerun.body.rerun_of, jobId);
  const again = await waitForJob(stack, rerun.body.job_id, (v) => v.job.state === 'running');
  assert.equal(again.job.trigger, 'rerun');
  const projectAudit = await stack.call('GET', '/v1/projects/hello-world/audit', {
    token: stack.adminToken,
  });
  const reruns = projectAudit.body.events.filter((e: { action: string }) => e.action === 'rerun');
  assert.deepEqual(
    reruns.map((e: { actor: string }) => e.actor),
    [`@${rerunBy}`],
  );
  const rerunRun = await failJob(runner, rerun.body.job_id, commit);

  // check_run requested_action: the example's own button ("lgtm|26764") is not
  // Conductor's and reruns nothing; Conductor's "rerun" button does.
  const action = example('check_run', 'requested_action');
  repoAs(action.repository, REPO, created.repositories[0].id);
  action.installation.id = INSTALLATION;
  action.check_run.id = rerunRun.id;
  action.check_run.head_sha = commit;
  action.check_run.check_suite.head_sha = commit;
  action.check_run.check_suite.after = commit;
  action.check_run.app.id = APP_ID;
  action.check_run.check_suite.app.id = APP_ID;
  fake.setPermission(REPO, action.sender.login, 'write');
  const before = (await jobsOf('hello-world')).length;
  const foreign = await deliver('check_run', action);
  assert.equal(foreign.status, 200, foreign.text);
  assert.equal(foreign.body.job_id, undefined, foreign.text);
  assert.equal((await jobsOf('hello-world')).length, before);
  action.requested_action.identifier = 'rerun';
  const pressed = await deliver('check_run', action);
  assert.equal(pressed.status, 202, pressed.text);
  assert.equal(pressed.body.rerun_of, rerun.body.job_id);
  await failJob(runner, pressed.body.job_id, commit);

  // installation deleted: its repositories are forgotten, and a push builds nothing.
  const deleted = installationAs(example('installation', 'deleted'));
  repoAs(deleted.repositories[0], REPO, created.repositories[0].id);
  const gone = await deliver('installation', deleted);
  assert.equal(gone.status, 200, gone.text);
  assert.deepEqual(gone.body, { installation: INSTALLATION, action: 'deleted' });
  assert.deepEqual(await listed(), []);
  fake.uninstall(INSTALLATION);
  const jobsBefore = (await jobsOf('hello-world')).length;
  const later = pushExample();
  repoAs(later.repository, REPO, created.repositories[0].id);
  later.installation.id = INSTALLATION;
  later.after = sha('octokit-examples-after-uninstall');
  const ignored = await deliver('push', later);
  assert.equal(ignored.status, 200, ignored.text);
  assert.match(ignored.body.ignored, /is not among the repositories .* installation 957387/);
  assert.equal((await jobsOf('hello-world')).length, jobsBefore);
});
