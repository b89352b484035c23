// The job page in a real browser: the graph of a running job, states and the
// open log changing without a reload as a runner works, ANSI colours and a
// masked secret in the log, rerun from the page, and screenshots of it all.
// The page polls every 1.5 s (the contract asks for 5 s); the waits allow 15 s
// so that a loaded CI machine does not fail them.
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { test } from 'node:test';
import {
  claimTask,
  complete,
  getJob,
  type Json,
  putSecret,
  sendWebhook,
  startE2E,
  uploadLog,
} from '../e2e/calls.ts';
import { sha } from '../e2e/payloads.ts';
import { githubPullRequest } from '../forge/fixtures/github.ts';
import { launchBrowser, newPage, runningJob, runTask, screenshot, signIn } from './support.ts';

const REPO = 'acme/pages';
const SECRET = 'hunter2-deploy-token';
const e2e = await startE2E(import.meta.filename, {
  // The fake forge is on loopback.
  env: { CONDUCTOR_ALLOW_PRIVATE_FORGES: '1' },
  projects: { project: { forge: 'github', id: 'pages', repo: REPO, cancel_superseded: false } },
});
const { stack } = e2e;
await putSecret(stack, 'pages', 'DEPLOY_TOKEN', SECRET);
const browser = await launchBrowser();

const DEMO = `  build:
    script: [make]
  test:
    needs: [build]
    matrix:
      node: [20, 22]
    script: [make test]
  lint:
    allow_failure: true
    script: [make lint]
  package:
    needs: [build, test, lint]
    secrets: [DEPLOY_TOKEN]
    script: [make package]
`;

/** What the test reads of the browser's window (the type check knows no DOM). */
interface BrowserWindow {
  getComputedStyle(el: unknown): { color: string };
}

/**
 * Stores `first` as the start of the claimed task's log, then opens the job's
 * page signed in with that task's log shown; answers the page and the log.
 */
async function openWithLog(
  job: { token: string; jobId: string },
  task: Record<string, Json>,
  first: string,
) {
  const res = await uploadLog(stack, job.token, task.id, {
    lease_id: task.lease_id,
    offset: 0,
    data: first,
  });
  assert.equal(res.status, 200, res.text);
  const { page } = await newPage(browser);
  await signIn(page, stack);
  await page.goto(`${stack.url}/jobs/${job.jobId}?task=${task.id}`);
  return { page, log: page.locator('[data-log]') };
}

const stateOf = (page: import('playwright-core').Page, name: string) =>
  page.locator(`[data-task-name="${name}"]`).getAttribute('data-state');

test('a running job shows its graph, and a task turns success on the page without a reload when its runner completes it', async () => {
  const job = await runningJob(e2e, 'live', DEMO);
  const { page } = await newPage(browser);
  await signIn(page, stack);
  await page.goto(`${stack.url}/jobs/${job.jobId}`);

  assert.equal(await page.locator('svg[aria-label="task graph"]').count(), 1);
  const names = await page
    .locator('[data-task-name]')
    .evaluateAll((els) => els.map((e) => e.getAttribute('data-task-name')));
  assert.deepEqual(names.sort(), [
    'build',
    'lint',
    'package',
    'test (node: 20)',
    'test (node: 22)',
  ]);
  assert.equal(await page.locator('[data-job-state]').getAttribute('data-job-state'), 'running');
  assert.equal(await stateOf(page, 'build'), 'queued');
  assert.equal(await stateOf(page, 'test (node: 20)'), 'waiting');
  // The matrix is grouped under its base name; allow_failure is said in words.
  assert.equal(await page.locator('svg .group > text', { hasText: 'test' }).count(), 1);
  assert.match(
    (await page.locator('[data-task-name="lint"]').textContent()) ?? '',
    /allowed to fail/,
  );
  await page.evaluate('window.kept = true');

  await runTask(stack, job.token); // build
  await page.locator('[data-task-name="build"][data-state="success"]').waitFor({ timeout: 60_000 });
  assert.match((await page.locator('[data-task-name="build"]').textContent()) ?? '', /success/);
  await page
    .locator('[data-task-name="test (node: 20)"][data-state="queued"]')
    .waitFor({ timeout: 60_000 });
  assert.equal(await page.evaluate('window.kept'), true, 'the page was not reloaded');
  await screenshot(page, 'job-running-1280x800');
  const phone = await newPage(browser, { width: 390, height: 844 });
  await signIn(phone.page, stack);
  await phone.page.goto(`${stack.url}/jobs/${job.jobId}`);
  await screenshot(phone.page, 'job-running-390x844');
});

test('a log with ANSI colours shows coloured spans, the masked secret as ***, and new lines as the runner sends them', async () => {
  const job = await runningJob(
    e2e,
    'colours',
    '  deploy:\n    secrets: [DEPLOY_TOKEN]\n    script: [make deploy]\n',
  );
  const task = await claimTask(stack, job.token);
  const first = `\u001b[31mred failure\u001b[0m and \u001b[1;32mgreen\u001b[0m\nusing ${SECRET} now\n`;
  const { page, log } = await openWithLog(job, task, first);
  let res: Awaited<ReturnType<typeof uploadLog>>;
  assert.equal(await log.textContent(), 'red failure and green\nusing *** now\n');
  const red = await log
    .locator('span', { hasText: 'red failure' })
    .last()
    .evaluate((el) => (globalThis as unknown as BrowserWindow).getComputedStyle(el).color);
  assert.equal(red, 'rgb(187, 0, 0)', 'ansi_up red');
  assert.ok(!(await page.content()).includes(SECRET));

  // The runner goes on: the open log grows without a reload, then the task ends.
  res = await uploadLog(stack, job.token, task.id, {
    lease_id: task.lease_id,
    offset: Buffer.byteLength(first),
    data: 'deployed\n',
  });
  assert.equal(res.status, 200, res.text);
  await page.locator('[data-log] #L3', { hasText: 'deployed' }).waitFor({ timeout: 60_000 });
  assert.equal(await log.textContent(), 'red failure and green\nusing *** now\ndeployed\n');
  res = await complete(stack, job.token, task.id, {
    lease_id: task.lease_id,
    outcome: 'success',
    exit_code: 0,
  });
  assert.equal(res.status, 200, res.text);
  await page.locator('[data-job-state="success"]').waitFor({ timeout: 60_000 });
  assert.equal(await log.textContent(), 'red failure and green\nusing *** now\ndeployed\n');
  // "Download raw" saves the log as stored: colour codes kept, the secret masked.
  const [download] = await Promise.all([
    page.waitForEvent('download'),
    page.getByRole('link', { name: 'Download raw' }).click(),
  ]);
  assert.equal(download.suggestedFilename(), 'deploy-attempt-1.log');
  const saved = await readFile((await download.path())!, 'utf8');
  assert.equal(saved, `${first.replace(SECRET, '***')}deployed\n`);
  await screenshot(page, 'job-finished-1280x800');
  const phone = await newPage(browser, { width: 390, height: 844 });
  await signIn(phone.page, stack);
  await phone.page.goto(`${stack.url}/jobs/${job.jobId}?task=${task.id}`);
  await screenshot(phone.page, 'job-finished-390x844');
});

test('rerun from the page creates a new job and opens it', async () => {
  const job = await runningJob(e2e, 'rerun', '  only:\n    script: [make]\n');
  await runTask(stack, job.token, { outcome: 'failed' });
  const { page } = await newPage(browser);
  await signIn(page, stack);
  await page.goto(`${stack.url}/jobs/${job.jobId}`);
  assert.equal(await page.locator('[data-job-state]').getAttribute('data-job-state'), 'failed');
  await Promise.all([
    page.waitForURL((u) => u.pathname.startsWith('/jobs/') && !u.pathname.endsWith(job.jobId)),
    page.getByRole('button', { name: 'Rerun', exact: true }).click(),
  ]);
  const newId = new URL(page.url()).pathname.split('/')[2]!;
  const view = await getJob(stack, newId);
  assert.equal(view.job.rerun_of, job.jobId);
  assert.equal(view.job.trigger, 'rerun');
});

test("a blocked job's page shows the task graph once the job is approved, without anyone reloading it", async () => {
  const head = sha('approve-me');
  e2e.fake.setFile(REPO, head, 'version: 1\ntasks:\n  check:\n    script: [make check]\n');
  const hook = await sendWebhook(
    stack,
    'github',
    'pull_request',
    githubPullRequest('opened', { repo: REPO, number: 11, headSha: head, headRepo: 'fork/pages' }),
    { secret: e2e.projects.project.secret },
  );
  assert.equal(hook.status, 202, hook.text);
  const jobId = hook.body.job_id as string;
  const { page } = await newPage(browser);
  await signIn(page, stack);
  await page.goto(`${stack.url}/jobs/${jobId}`);
  assert.equal(await page.locator('[data-job-state]').getAttribute('data-job-state'), 'blocked');
  assert.equal(await page.locator('[data-task-name]').count(), 0);
  const approved = await stack.call('POST', `/v1/jobs/${jobId}/approve`, {
    token: stack.adminToken,
  });
  assert.equal(approved.status, 200, approved.text);
  await page.locator('[data-task-name="check"][data-state="queued"]').waitFor({ timeout: 60_000 });
  assert.equal(await page.locator('[data-job-state]').getAttribute('data-job-state'), 'running');
});

test('an OSC 8 hyperlink in a log shows as plain text in the browser, when the page is drawn and when the live update brings it', async () => {
  const job = await runningJob(e2e, 'osc8', '  fork:\n    script: [make]\n');
  const task = await claimTask(stack, job.token);
  const link = (url: string, text: string) => `\u001b]8;;${url}\u001b\\${text}\u001b]8;;\u001b\\`;
  const first = `see ${link('https://evil.example/login', 'click here')}\n`;
  const { page, log } = await openWithLog(job, task, first);
  assert.equal(await log.textContent(), 'see click here\n');

  const res = await uploadLog(stack, job.token, task.id, {
    lease_id: task.lease_id,
    offset: Buffer.byteLength(first),
    data: `and ${link('javascript:alert(1)', 'this')} too\n`,
  });
  assert.equal(res.status, 200, res.text);
  await page.locator('[data-log] #L2', { hasText: 'this' }).waitFor({ timeout: 60_000 });
  assert.equal(await log.textContent(), 'see click here\nand this too\n');
  // The only links in the log are its line numbers.
  const hrefs = await log
    .locator('a')
    .evaluateAll((els) => els.map((el) => el.getAttribute('href')));
  assert.deepEqual(hrefs, ['#L1', '#L2']);
  assert.ok(!(await page.content()).includes('evil.example'));
});
