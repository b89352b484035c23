// The GitHub App (issue #53) end to end: the local stack configured with an
// app whose fake GitHub (test/helpers/fake-github-app.ts) verifies the app's
// JWT with its public key, hands out installation tokens with an expiry and
// checks them on every call.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { installedRepositories } from '../../lib/app/github-app.ts';
import { TOKEN_RENEW_MARGIN_MS, TokenCache } from '../../lib/forge/github/app.ts';
import { githubPush } from '../forge/fixtures/github.ts';
import {
  checkRunEvent,
  checkSuiteEvent,
  installationEvent,
  installationRepositoriesEvent,
} from '../forge/fixtures/github-app.ts';
import {
  type CheckRun,
  type FakeGitHubApp,
  startFakeGitHubApp,
} from '../helpers/fake-github-app.ts';
import { testStack } from '../helpers/stack.ts';
import { claimTask, complete, createWorker, sendWebhook, uploadLog, waitForJob } from './calls.ts';
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

/** A delivery of the app: signed with the app's secret unless told otherwise. */
function deliver(event: string, payload: unknown, secret = fake.webhookSecret) {
  return sendWebhook(stack, 'github', event, payload, { secret });
}

async function install(id: number, repos: string[]) {
  fake.install(id, repos);
  const res = await deliver('installation', installationEvent('created', id, repos));
  assert.equal(res.status, 200, res.text);
}

async function appProject(id: string, repo: string) {
  const res = await stack.call('POST', '/v1/projects', {
    token: stack.adminToken,
    body: {
      id,
      name: id,
      forge: 'github',
      repo,
      repo_url: `https://github.com/${repo}.git`,
      github_app: true,
    },
  });
  assert.equal(res.status, 201, res.text);
  return res.body;
}

const appPush = (repo: string, commit: string, installation: number) => ({
  ...githubPush(repo, commit),
  installation: { id: installation, node_id: 'MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uMQ==' },
});

/** Uploads one JUnit report as the runner does: begin, PUT the bytes, commit. */
async function uploadReport(
  token: string,
  task: { id: string; lease_id: string },
  path: string,
  xml: string,
) {
  const bytes = Buffer.from(xml);
  const begin = await stack.call('POST', `/v1/runner/tasks/${task.id}/reports`, {
    token,
    body: {
      lease_id: task.lease_id,
      path,
      size: bytes.length,
      sha256: createHash('sha256').update(bytes).digest('hex'),
    },
  });
  assert.equal(begin.status, 200, begin.text);
  const put = await fetch(new URL(begin.body.upload.parts[0].url, stack.url), {
    method: 'PUT',
    body: bytes,
  });
  assert.ok(put.status < 300, `PUT answered ${put.status}`);
  const commit = await stack.call(
    'POST',
    `/v1/runner/tasks/${task.id}/reports/${begin.body.report.id}/commit`,
    { token, body: { lease_id: task.lease_id } },
  );
  assert.equal(commit.status, 200, commit.text);
  return commit.body.report;
}

async function until<T>(what: string, read: () => T | undefined | false): Promise<T> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const value = read();
    if (value) return value;
    if (Date.now() > deadline) {
      const { rows } = await ctx.pool.query(
        'select state, result, attempts, last_error from status_outbox order by id',
      );
      assert.fail(`timed out waiting for ${what}; the status outbox: ${JSON.stringify(rows)}`);
    }
    await sleep(20);
  }
}

test('installing the app, adding and removing repositories, and uninstalling keep the list of installed repositories', async () => {
  const res = await deliver(
    'installation',
    installationEvent('created', 101, ['acme/api', 'acme/web']),
  );
  assert.equal(res.status, 200, res.text);
  assert.deepEqual(res.body, { installation: 101, action: 'created', repositories: 2 });
  const listed = async () =>
    (await installedRepositories(ctx)).filter((r) => r.installation_id === 101).map((r) => r.repo);
  assert.deepEqual(await listed(), ['acme/api', 'acme/web']);

  const added = await deliver(
    'installation_repositories',
    installationRepositoriesEvent(101, 'acme', ['acme/docs'], []),
  );
  assert.deepEqual(added.body, { installation: 101, added: 1, removed: 0 });
  const removed = await deliver(
    'installation_repositories',
    installationRepositoriesEvent(101, 'acme', [], ['acme/web']),
  );
  assert.deepEqual(removed.body, { installation: 101, added: 0, removed: 1 });
  assert.deepEqual(await listed(), ['acme/api', 'acme/docs']);
  const [row] = (await installedRepositories(ctx)).filter((r) => r.repo === 'acme/api');
  assert.equal(row?.account, 'acme');

  // The installation's audit says who did it.
  const audit = await stack.call('GET', '/v1/audit?limit=20', { token: stack.adminToken });
  const actions = audit.body.events.map(
    (e: { action: string; actor: string }) => `${e.action} ${e.actor}`,
  );
  assert.ok(actions.includes('github_app.created @rosalind'), actions.join(', '));

  const gone = await deliver('installation', installationEvent('deleted', 101, []));
  assert.equal(gone.status, 200, gone.text);
  assert.deepEqual(await listed(), []);
});

test('a delivery with a wrong signature is refused 401, and no installation is recorded', async () => {
  const res = await deliver(
    'installation',
    installationEvent('created', 102, ['acme/secret']),
    'not-the-app-secret',
  );
  assert.equal(res.status, 401, res.text);
  assert.match(res.body.error.message, /signature/);
  assert.deepEqual(
    (await installedRepositories(ctx)).filter((r) => r.installation_id === 102),
    [],
  );
});

test('a push to a repository the app is not installed on is ignored with a clear answer', async () => {
  await appProject('orphan', 'acme/orphan');
  const res = await deliver('push', appPush('acme/orphan', sha('orphan'), 103));
  assert.equal(res.status, 200, res.text);
  assert.match(res.body.ignored, /acme\/orphan is not among the repositories .* installation 103/);
  const jobs = await stack.call('GET', '/v1/projects/orphan/jobs', { token: stack.adminToken });
  assert.equal(jobs.body.jobs.length, 0);
});

test('a push through the app makes a job with no project secret; its check run is created, updated and completed with the summary', async () => {
  const repo = 'northwind/ledger-app';
  await install(201, [repo]);
  const created = await appProject('ledger-app', repo);
  assert.equal(created.webhook_secret, undefined, 'an app project has no webhook secret to show');
  assert.equal(created.project.github_app, true);
  assert.equal(created.project.commit_statuses, 'on: check runs through the GitHub App');

  const { token: runner } = await createWorker(stack, ['app-flow']);
  const commit = sha('app-flow');
  fake.setFile(
    repo,
    commit,
    pipeline(
      'app-flow',
      '  build:\n    script: [make build]\n  test:\n    needs: [build]\n    script: [make test]\n',
    ),
  );
  const res = await deliver('push', appPush(repo, commit, 201));
  assert.equal(res.status, 202, res.text);
  const jobId = res.body.job_id;
  await waitForJob(stack, jobId, (v) => v.job.state === 'running');

  // The file was read with an installation token the fake issued for the app's JWT.
  const read = fake.calls.find((c) => c.path.endsWith('/contents/.conductor.yml'));
  assert.equal(read?.answered, 200);
  assert.equal(read?.installation, 201);
  assert.match(read?.authorization ?? '', /^Bearer ghs_/);
  assert.ok(fake.mints.some((m) => m.installation === 201));

  const [run] = (await until(
    'the check run',
    () => fake.runsFor(commit).length > 0 && fake.runsFor(commit),
  )) as [CheckRun];
  assert.equal(run.fields.name, 'conductor/e2e');
  assert.equal(run.fields.external_id, jobId);
  assert.match(
    run.fields.details_url,
    new RegExp(`^https://ci.northwind.example/jobs/${jobId}\\?sig=`),
  );
  assert.ok(['queued', 'in_progress'].includes(run.fields.status), run.fields.status);

  const build = await claimTask(stack, runner);
  assert.equal(
    (
      await complete(stack, runner, build.id, {
        lease_id: build.lease_id,
        outcome: 'success',
        exit_code: 0,
      })
    ).status,
    200,
  );
  const testTask = await claimTask(stack, runner);
  const log = `${Array.from({ length: 40 }, (_, i) => `line ${i + 1}`).join('\n')}\nAssertionError: ledger off by 0.01\n`;
  assert.equal(
    (
      await uploadLog(stack, runner, testTask.id, {
        lease_id: testTask.lease_id,
        offset: 0,
        data: log,
      })
    ).status,
    200,
  );
  await complete(stack, runner, testTask.id, {
    lease_id: testTask.lease_id,
    outcome: 'failed',
    exit_code: 1,
  });

  const done = await until(
    'the completed check run',
    () => run.fields.status === 'completed' && run,
  );
  assert.equal(done.fields.conclusion, 'failure');
  const { summary, text } = done.fields.output;
  assert.match(summary, /\| build \| success \|/);
  assert.match(summary, /\| test \| failed \|/);
  assert.match(summary, /The job's page/);
  assert.match(text, /### test failed \(exit code 1\)/);
  assert.match(text, /AssertionError: ledger off by 0\.01/);
  assert.match(text, /line 40/);
  assert.doesNotMatch(text, /line 10\n/, 'only the last lines of the log');
  assert.deepEqual(done.fields.actions, [
    { label: 'Re-run', description: 'Run this job again', identifier: 'rerun' },
  ]);
  // One run per job: created once, then updated.
  assert.equal(fake.runsFor(commit).length, 1);
  assert.ok(done.history.length >= 2);
  // No commit status was posted for an app project: its checks say it.
  assert.equal(fake.calls.filter((c) => c.path.includes('/statuses/')).length, 0);

  // Re-run from GitHub: a reader may not, a writer may, and it is audited.
  fake.setPermission(repo, 'visitor', 'read');
  const refused = await deliver(
    'check_run',
    checkRunEvent(done.id, repo, commit, { installation: 201, by: 'visitor' }),
  );
  assert.equal(refused.status, 403, refused.text);
  assert.match(refused.body.error.message, /rerunning a job needs write access/);

  fake.setPermission(repo, 'rosalind', 'write');
  const rerun = await deliver(
    'check_run',
    checkRunEvent(done.id, repo, commit, { installation: 201, by: 'rosalind' }),
  );
  assert.equal(rerun.status, 202, rerun.text);
  assert.equal(rerun.body.rerun_of, jobId);
  const again = await waitForJob(stack, rerun.body.job_id, (v) => v.job.state === 'running');
  assert.equal(again.job.trigger, 'rerun');
  // The rerun reports in a check run of its own.
  await until('the rerun check run', () => fake.runsFor(commit).length === 2);

  const audit = await stack.call('GET', '/v1/projects/ledger-app/audit', {
    token: stack.adminToken,
  });
  const rows = audit.body.events.filter((e: { action: string }) => e.action === 'rerun');
  assert.equal(rows.length, 1);
  assert.equal(rows[0].actor, '@rosalind');
});

test('check_run requested_action "rerun" and check_suite rerequested rerun the job too', async () => {
  const repo = 'northwind/suite-app';
  await install(202, [repo]);
  await appProject('suite-app', repo);
  fake.setPermission(repo, 'rosalind', 'admin');
  const { token: runner } = await createWorker(stack, ['suite-app']);
  const commit = sha('suite-app');
  fake.setFile(repo, commit, pipeline('suite-app', '  only:\n    script: [exit 1]\n'));
  const res = await deliver('push', appPush(repo, commit, 202));
  assert.equal(res.status, 202, res.text);
  await waitForJob(stack, res.body.job_id, (v) => v.job.state === 'running');
  const task = await claimTask(stack, runner);
  await complete(stack, runner, task.id, {
    lease_id: task.lease_id,
    outcome: 'failed',
    exit_code: 1,
  });
  await waitForJob(stack, res.body.job_id, (v) => v.job.state === 'failed');
  const [run] = (await until(
    'the completed run',
    () => fake.runsFor(commit)[0]?.fields.status === 'completed' && fake.runsFor(commit),
  )) as [CheckRun];

  const action = await deliver(
    'check_run',
    checkRunEvent(run.id, repo, commit, {
      installation: 202,
      by: 'rosalind',
      action: 'requested_action',
      identifier: 'rerun',
    }),
  );
  assert.equal(action.status, 202, action.text);
  await waitForJob(stack, action.body.job_id, (v) => v.job.state === 'running');
  const second = await claimTask(stack, runner);
  await complete(stack, runner, second.id, {
    lease_id: second.lease_id,
    outcome: 'failed',
    exit_code: 1,
  });
  await waitForJob(stack, action.body.job_id, (v) => v.job.state === 'failed');

  const suite = await deliver('check_suite', checkSuiteEvent(repo, commit, 'rosalind', 202));
  assert.equal(suite.status, 202, suite.text);
  // The newest finished job of the commit is the one rerun.
  assert.equal(suite.body.rerun_of, action.body.job_id);
});

test('an installation token is kept until it nears its expiry, then renewed before use', async () => {
  const repo = 'northwind/tokens-app';
  await install(203, [repo]);
  await appProject('tokens-app', repo);
  const mints = () => fake.mints.filter((m) => m.installation === 203);
  // Tokens that leave the renewal margin 4 s after they are minted.
  fake.tokenTtlMs = TOKEN_RENEW_MARGIN_MS + 4_000;
  const push = async (seed: string) => {
    const commit = sha(seed);
    fake.setFile(repo, commit, pipeline('tokens-never-claimed', '  a:\n    script: [make a]\n'));
    const res = await deliver('push', appPush(repo, commit, 203));
    assert.equal(res.status, 202, res.text);
    await waitForJob(stack, res.body.job_id, (v) => v.job.state === 'running');
    return fake.calls
      .filter((c) => c.path.endsWith('/contents/.conductor.yml') && c.installation === 203)
      .at(-1)!;
  };
  try {
    const first = await push('tokens-1');
    const second = await push('tokens-2');
    assert.equal(mints().length, 1, 'one token for both jobs');
    assert.equal(second.authorization, first.authorization);
    await sleep(4_500);
    const third = await push('tokens-3');
    assert.equal(mints().length, 2, 'renewed once it was within the margin of its expiry');
    assert.equal(third.authorization, `Bearer ${mints()[1]!.token}`);
    assert.equal(third.answered, 200);
  } finally {
    fake.tokenTtlMs = 3_600_000;
  }
});

test('the token cache keeps a token until the renewal margin and mints once for concurrent callers', async () => {
  let now = Date.parse('2026-12-06T09:00:00Z');
  const cache = new TokenCache(() => now);
  let mints = 0;
  const mint = async () => {
    mints++;
    await sleep(5);
    return { token: `t${mints}`, expiresAt: new Date(now + 3_600_000) };
  };
  const [a, b] = await Promise.all([cache.get(7, mint), cache.get(7, mint)]);
  assert.equal(a, 't1');
  assert.equal(b, 't1');
  assert.equal(mints, 1);
  now += 3_600_000 - TOKEN_RENEW_MARGIN_MS - 1_000;
  assert.equal(await cache.get(7, mint), 't1', 'still outside the margin');
  now += 2_000;
  assert.equal(await cache.get(7, mint), 't2', 'renewed inside the margin');
  cache.forget(7);
  assert.equal(await cache.get(7, mint), 't3');
});

test('a push to a project that is not served by the app is ignored, and a project served by the app needs github as its forge', async () => {
  const repo = 'northwind/hooked';
  await install(204, [repo]);
  const res = await stack.call('POST', '/v1/projects', {
    token: stack.adminToken,
    body: {
      id: 'hooked',
      name: 'hooked',
      forge: 'github',
      repo,
      repo_url: `https://github.com/${repo}.git`,
    },
  });
  assert.equal(res.status, 201);
  assert.equal(typeof res.body.webhook_secret, 'string');
  const push = await deliver('push', appPush(repo, sha('hooked'), 204));
  assert.equal(push.status, 200, push.text);
  assert.match(push.body.ignored, /takes northwind\/hooked's deliveries from its own webhook/);

  const gitea = await stack.call('POST', '/v1/projects', {
    token: stack.adminToken,
    body: {
      id: 'gitea-app',
      name: 'x',
      forge: 'gitea',
      repo: 'a/b',
      repo_url: 'https://gitea.example/a/b.git',
      forge_url: 'https://gitea.example',
      github_app: true,
    },
  });
  assert.equal(gitea.status, 400);
  assert.match(gitea.body.error.message, /github_app: only a github project/);
});

test('the repositories offered to a person are those the app is installed on that GitHub says they administer', async () => {
  await install(205, ['acme/mine', 'acme/theirs']);
  fake.setPermission('acme/mine', 'grace', 'admin');
  fake.setPermission('acme/theirs', 'grace', 'write');
  const offered = await installedRepositories(ctx, { login: 'grace' });
  assert.deepEqual(
    offered.map((r) => r.repo),
    ['acme/mine'],
  );
  assert.equal(offered[0]?.project_id, null);
  const all = await installedRepositories(ctx);
  assert.equal(all.find((r) => r.repo === 'northwind/ledger-app')?.project_id, 'ledger-app');
});

test('an app event that names no repository is answered 200 and builds nothing', async () => {
  const res = await deliver('installation_target', {
    action: 'renamed',
    account: { login: 'acme-renamed', id: 90211 },
    changes: { login: { from: 'acme' } },
    target_type: 'Organization',
    installation: { id: 206 },
    sender: { login: 'rosalind', id: 4410921 },
  });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.ignored, 'event "installation_target" triggers nothing');
});

test("a job's check run says how its tests went and names the first failed tests with their messages' first lines", async () => {
  const repo = 'northwind/tests-app';
  await install(207, [repo]);
  await appProject('tests-app', repo);
  const { token: runner } = await createWorker(stack, ['tests-app']);
  const commit = sha('tests-app');
  fake.setFile(
    repo,
    commit,
    pipeline(
      'tests-app',
      '  unit:\n    script: [make test]\n    reports:\n      junit: [out/*.xml]\n',
    ),
  );
  const res = await deliver('push', appPush(repo, commit, 207));
  assert.equal(res.status, 202, res.text);
  await waitForJob(stack, res.body.job_id, (v) => v.job.state === 'running');
  const task = (await claimTask(stack, runner)) as { id: string; lease_id: string };
  // 328 pass, 12 fail (one with a backtick in its name and a multi-line message): 340 tests.
  const cases = [
    '<testcase classname="Tax" name="rounds `half` up"><error>\n\nTypeError: rate is undefined\n    at tax.js:3\n</error></testcase>',
    ...Array.from({ length: 328 }, (_, i) => `<testcase classname="Ledger" name="passes ${i}"/>`),
    ...Array.from(
      { length: 11 },
      (_, i) =>
        `<testcase classname="Ledger" name="balances ${i + 1}"><failure message="expected ${i + 1} to equal 0">at Ledger.java:${i + 10}</failure></testcase>`,
    ),
  ];
  const report = await uploadReport(
    runner,
    task,
    'out/TEST-ledger.xml',
    `<testsuite name="ledger">${cases.join('')}</testsuite>`,
  );
  assert.deepEqual(report.totals, { passed: 328, failed: 11, errored: 1, skipped: 0, time_s: 0 });
  await complete(stack, runner, task.id, {
    lease_id: task.lease_id,
    outcome: 'failed',
    exit_code: 1,
  });
  const run = await until(
    'the completed check run',
    () => fake.runsFor(commit)[0]?.fields.status === 'completed' && fake.runsFor(commit)[0],
  );
  const { title, summary } = run.fields.output;
  assert.match(title, /^12 of 340 tests failed; tasks /);
  assert.match(summary, /\*\*Tests:\*\* 12 of 340 tests failed/);
  assert.match(summary, /^- `Ledger › balances 1` `expected 1 to equal 0` \(failed in unit\)$/m);
  const named = summary.split('\n').filter((l: string) => /^- `/.test(l));
  assert.equal(named.length, 10, 'at most ten failed tests are named');
  assert.match(summary, /^- … and 2 more: see the job's page$/m);
  // In the report's order; a backtick in a name cannot break out of its code span.
  assert.match(
    named[0],
    /^- `Tax › rounds 'half' up` `TypeError: rate is undefined` \(errored in unit\)$/,
  );
  assert.match(named[9], /balances 9/);
  assert.doesNotMatch(summary, /balances 10/);
  // The table of tasks is still there, after the tests.
  assert.ok(summary.indexOf('**Tests:**') < summary.indexOf('| unit | failed |'));
});

test("a passing job's check run says how many tests passed, and lists none", async () => {
  const repo = 'northwind/green-app';
  await install(208, [repo]);
  await appProject('green-app', repo);
  const { token: runner } = await createWorker(stack, ['green-app']);
  const commit = sha('green-app');
  fake.setFile(
    repo,
    commit,
    pipeline(
      'green-app',
      '  unit:\n    script: [make test]\n    reports:\n      junit: [out/*.xml]\n',
    ),
  );
  const res = await deliver('push', appPush(repo, commit, 208));
  assert.equal(res.status, 202, res.text);
  await waitForJob(stack, res.body.job_id, (v) => v.job.state === 'running');
  const task = (await claimTask(stack, runner)) as { id: string; lease_id: string };
  await uploadReport(
    runner,
    task,
    'out/a.xml',
    '<testsuite name="s"><testcase name="a"/><testcase name="b"/><testcase name="c"><skipped/></testcase></testsuite>',
  );
  await complete(stack, runner, task.id, {
    lease_id: task.lease_id,
    outcome: 'success',
    exit_code: 0,
  });
  const run = await until(
    'the completed check run',
    () => fake.runsFor(commit)[0]?.fields.status === 'completed' && fake.runsFor(commit)[0],
  );
  assert.equal(run.fields.conclusion, 'success');
  assert.match(run.fields.output.title, /^2 tests passed, 1 skipped; tasks /);
  assert.match(run.fields.output.summary, /\*\*Tests:\*\* 2 tests passed, 1 skipped/);
  assert.doesNotMatch(run.fields.output.summary, /^- /m);
});
