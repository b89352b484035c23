// The unblock form of a block step in a real browser (issue #30): the page of
// a job waiting at a block shows its prompt and fields; a missing required
// field is refused by the form; unblocked, the page says by whom, and the task
// that needs the block gets the fields as the block's outputs. A block step of
// an untrusted job (a fork's pull request) says so on its form (issue #46).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  claimTask,
  createWorker,
  deliverRunning,
  getJob,
  type Json,
  startE2E,
  waitForJob,
} from '../e2e/calls.ts';
import { pipeline, sha } from '../e2e/payloads.ts';
import { githubPullRequest } from '../forge/fixtures/github.ts';
import { launchBrowser, newPage, runningJob, runTask, screenshot, signIn } from './support.ts';

const e2e = await startE2E(import.meta.filename, {
  env: { CONDUCTOR_ALLOW_PRIVATE_FORGES: '1' },
  projects: {
    project: { forge: 'github', id: 'gates', repo: 'acme/gates', cancel_superseded: false },
  },
});
const { stack } = e2e;
const browser = await launchBrowser();

const TASKS = `  build:
    script: [make]
  approve-prod:
    needs: [build]
    block:
      prompt: "Deploy to production?"
      fields:
        - {name: reason, type: text, required: true}
        - {name: region, type: select, options: [eu, us]}
  deploy:
    needs: [approve-prod]
    script: [deploy]
`;

test('a blocked task is unblocked from the job page with its fields, which the next task receives', async () => {
  const job = await runningJob(e2e, 'gate', TASKS);
  await runTask(stack, job.token);
  const blocked = await waitForJob(stack, job.jobId, (v) =>
    v.tasks.some((t: Json) => t.name === 'approve-prod' && t.state === 'blocked'),
  );
  assert.equal(blocked.job.state, 'running');

  const { page } = await newPage(browser);
  await signIn(page, stack, `/jobs/${job.jobId}`);
  const card = page.locator('[data-blocked="approve-prod"]');
  assert.equal(await card.locator('[data-prompt]').textContent(), 'Deploy to production?');
  assert.equal(await card.locator('[data-untrusted]').count(), 0, 'a trusted job says nothing');
  await screenshot(page, 'job-blocked');

  // The browser itself refuses a form without its required field.
  await card.getByRole('button', { name: 'Unblock' }).click();
  assert.equal((await getJob(stack, job.jobId)).tasks[1].state, 'blocked');

  await card.getByLabel('reason (required)').fill('hotfix for INC-7');
  await card.getByLabel('region').selectOption('eu');
  await Promise.all([
    page.waitForURL((u) => u.pathname === `/jobs/${job.jobId}`),
    card.getByRole('button', { name: 'Unblock' }).click(),
  ]);
  await page.locator('[data-unblocked="approve-prod"]').waitFor({ timeout: 15_000 });
  assert.equal(
    await page.locator('[data-unblocked="approve-prod"] [data-unblocked-by]').textContent(),
    'admin token',
  );
  await screenshot(page, 'job-unblocked');

  const view = await getJob(stack, job.jobId);
  const approve = view.tasks.find((t: Json) => t.name === 'approve-prod');
  assert.equal(approve.state, 'success');
  assert.equal(approve.unblocked_by, 'admin token');
  assert.deepEqual(approve.outputs, { reason: 'hotfix for INC-7', region: 'eu' });
  const deploy = await claimTask(stack, job.token);
  assert.equal(deploy.name, 'deploy');
  assert.deepEqual(deploy.needs_outputs, {
    'approve-prod': { reason: 'hotfix for INC-7', region: 'eu' },
  });
});

test("the unblock form of an untrusted job's block step says the job is untrusted", async () => {
  const repo = 'acme/fork-gates';
  const label = 'fork-gate';
  const { secret } = await e2e.addProject({
    forge: 'github',
    id: 'fork-gates',
    repo,
    fork_pull_requests: 'run',
  });
  const head = sha(label);
  e2e.fake.setFile(repo, head, pipeline(label, TASKS));
  const { hook, view } = await deliverRunning(
    stack,
    'github',
    'pull_request',
    githubPullRequest('opened', { repo, number: 9, headSha: head, headRepo: 'mallory/fork-gates' }),
    secret,
  );
  assert.equal(view.job.trusted, false);
  const { token } = await createWorker(stack, [label], `${label}-untrusted`, { untrusted: true });
  await runTask(stack, token);
  const jobId = hook.body.job_id;
  await waitForJob(stack, jobId, (v) =>
    v.tasks.some((t: Json) => t.name === 'approve-prod' && t.state === 'blocked'),
  );

  const { page } = await newPage(browser);
  await signIn(page, stack, `/jobs/${jobId}`);
  const card = page.locator('[data-blocked="approve-prod"]');
  assert.equal(await card.locator('[data-prompt]').textContent(), 'Deploy to production?');
  const warning = card.locator('[data-untrusted]');
  assert.ok(await warning.isVisible(), 'the warning is on the form, where it is answered');
  assert.match(
    (await warning.textContent()) ?? '',
    /Untrusted job\. This job comes from someone who may not write to the repository/,
  );
  await screenshot(page, 'job-blocked-untrusted');
});
