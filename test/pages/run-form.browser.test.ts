// The Run form on the project page (issue #29), in a real browser: a field
// per input the pipeline declares, for a signed-in person who may run; its
// submit starts a job of the ref's head with those inputs and opens its page.
// An input the head's pipeline does not take answers 400 naming it, with no job made.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { createProject, waitForJob } from '../e2e/calls.ts';
import { testStack } from '../helpers/stack.ts';
import { launchBrowser, newPage, signIn } from './support.ts';

const stack = await testStack(import.meta.filename);
const browser = await launchBrowser();
const repo = await mkdtemp(join(tmpdir(), 'conductor-run-form-'));
after(() => rm(repo, { recursive: true, force: true }));
const git = (...args: string[]) =>
  execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', ...args], { cwd: repo })
    .toString()
    .trim();
git('init', '-q', '-b', 'main');
await writeFile(
  join(repo, '.conductor.yml'),
  `version: 1
inputs:
  env:
    type: choice
    options: [staging, prod]
    default: staging
  dry_run:
    type: boolean
    default: true
  note:
    type: string
    description: why this run
tasks:
  deploy:
    script: ["./deploy \${{ inputs.env }}"]
`,
);
git('add', '.');
git('commit', '-q', '-m', 'pipeline');
const head = git('rev-parse', 'HEAD');
await createProject(stack, {
  id: 'runs',
  name: 'runs',
  forge: 'github',
  repo: 'acme/runs',
  repo_url: repo,
});

test('the Run form with inputs starts a job with them', async () => {
  // A first run (the API, inputs left to their defaults) makes the pipeline's
  // inputs known to the page.
  const first = await stack.call('POST', '/v1/projects/runs/jobs', {
    token: stack.adminToken,
    body: { ref: 'main' },
  });
  assert.equal(first.status, 202, first.text);
  await waitForJob(stack, first.body.job_id);

  const { page } = await newPage(browser);
  // Without a session the page shows no form.
  const anonymous = await fetch(`${stack.url}/projects/runs`, { redirect: 'manual' });
  assert.equal(anonymous.status, 302);
  await signIn(page, stack, '/projects/runs');
  const form = page.locator('form[data-run-form]');
  assert.equal(await form.count(), 1);
  assert.deepEqual(
    await form
      .locator('[data-input]')
      .evaluateAll((els) => els.map((e) => e.getAttribute('data-input'))),
    ['env', 'dry_run', 'note'],
  );
  assert.equal(await page.locator('#input-env').inputValue(), 'staging', 'the default is chosen');
  await page.selectOption('#input-env', 'prod');
  await page.selectOption('#input-dry_run', 'false');
  await page.fill('#input-note', 'release 1.2');
  await Promise.all([
    page.waitForURL((u) => u.pathname.startsWith('/jobs/')),
    form.locator('button[type=submit]').click(),
  ]);
  const jobId = new URL(page.url()).pathname.split('/')[2]!;
  assert.notEqual(jobId, first.body.job_id);
  const view = await waitForJob(stack, jobId);
  assert.equal(view.job.state, 'running', JSON.stringify(view.job));
  assert.equal(view.job.trigger, 'manual');
  assert.equal(view.job.sha, head);
  await page.waitForSelector('[data-job-state="running"]');
  const { rows } = await stack.context.pool.query<{
    env: Record<string, string>;
    script: string[];
  }>('select env, script from tasks where job_id = $1', [jobId]);
  assert.equal(rows[0]!.env.CONDUCTOR_INPUT_ENV, 'prod');
  assert.equal(rows[0]!.env.CONDUCTOR_INPUT_DRY_RUN, 'false');
  assert.equal(rows[0]!.env.CONDUCTOR_INPUT_NOTE, 'release 1.2');
  assert.deepEqual(rows[0]!.script, ['./deploy prod']);

  // A form without its CSRF token is refused.
  const forged = await page.evaluate(async () => {
    const res = await fetch('/projects/runs/run', {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'ref=main',
    });
    return res.status;
  });
  assert.equal(forged, 403);
});

test('a value the pipeline at the head does not take is refused at once, naming the input (#48)', async () => {
  const { page } = await newPage(browser);
  await signIn(page, stack, '/projects/runs');
  const form = page.locator('form[data-run-form]');
  // The form was drawn from the pipeline of the latest trusted job; the
  // branch's head has since dropped `note`.
  await writeFile(
    join(repo, '.conductor.yml'),
    'version: 1\ninputs:\n  env: {type: choice, options: [staging, prod], default: staging}\ntasks:\n  deploy:\n    script: [./deploy]\n',
  );
  git('commit', '-q', '-am', 'no note');
  const newHead = git('rev-parse', 'HEAD');
  const jobsBefore = await stack.context.pool.query('select count(*)::int as n from jobs');
  await page.fill('#input-note', 'why not');
  const [response] = await Promise.all([
    page.waitForResponse((r) => r.url().endsWith('/projects/runs/run')),
    form.locator('button[type=submit]').click(),
  ]);
  assert.equal(response.status(), 400);
  await page.waitForLoadState();
  const text = (await page.locator('body').textContent()) ?? '';
  assert.match(
    text,
    new RegExp(`inputs\\.note: not declared by \\.conductor\\.yml at ${newHead.slice(0, 12)}`),
  );
  const jobsAfter = await stack.context.pool.query('select count(*)::int as n from jobs');
  assert.equal(jobsAfter.rows[0].n, jobsBefore.rows[0].n, 'no job was made');
});
