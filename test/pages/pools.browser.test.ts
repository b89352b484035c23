// Runner pools on the pages (issue #51), in a real browser: the project's
// page lists the pools that serve it with their labels, trust, provider,
// maximum and runners, and the job page says why each waiting task waits (a
// pool at its maximum; no runner or pool for its labels). The pool's runner
// is a real one the `process` provider launched.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ProcessProvider } from '../../lib/fleet/process.ts';
import { poolProject } from '../fleet/support.ts';
import { testStack } from '../helpers/stack.ts';
import { tempDir, waitFor } from '../runner/support.ts';
import { launchBrowser, newPage, screenshot, signIn } from './support.ts';

const stack = await testStack(import.meta.filename);
const admin = { token: stack.adminToken };
const provider = stack.context.fleet!.process as ProcessProvider;
const browser = await launchBrowser();

test('the project page lists its pools with their runners, and the job page says why a task waits for one', async () => {
  const tasks = `  first:
    script: [sleep 60]
  second:
    script: [echo second]
  render:
    labels: [gpu]
    script: [echo never]
`;
  const { id, push } = await poolProject(stack, 'pooled', tasks, {
    trust: 'trusted',
    provider: 'process',
    max: 1,
    settings: { same_user: true, idle_limit_s: 5, workdir: await tempDir('conductor-pool-page-') },
  });
  const jobId = await push();
  await waitFor('the pool runner to run the first task', async () => {
    const res = await stack.call('GET', '/v1/pools', admin);
    const pool = res.body.pools.find((p: { name: string }) => p.name === id);
    return pool?.runners.running === 1 ? true : undefined;
  });

  const { page } = await newPage(browser);
  await signIn(page, stack, `/projects/${id}`);
  const row = page.locator(`[data-pool="${id}"]`);
  assert.deepEqual(await row.locator('td').allTextContents(), [
    id,
    'pooled',
    'trusted',
    'process',
    'this project only',
    '1',
    '0',
    '1',
  ]);
  assert.ok(await page.getByRole('heading', { name: 'Runner pools' }).isVisible());
  await screenshot(page, 'project-pools');

  await page.goto(`${stack.url}/jobs/${jobId}`);
  const view = await stack.call('GET', `/v1/jobs/${jobId}`, admin);
  const idOf = (name: string) => view.body.tasks.find((t: { name: string }) => t.name === name).id;
  const note = (name: string) => page.locator(`[data-row="${idOf(name)}"] td.note`).textContent();
  assert.equal(await note('second'), `waiting for a runner of pool ${id} (1 of 1 at work)`);
  assert.equal(
    await note('render'),
    `no runner or pool serves labels gpu for trusted tasks of project ${id}`,
  );
  await screenshot(page, 'job-pool-waiting');

  const cancel = await stack.call('POST', `/v1/jobs/${jobId}/cancel`, admin);
  assert.equal(cancel.status, 200, cancel.text);
  await waitFor(
    'the pool runner to exit',
    () => (provider.pids().length === 0 ? true : undefined),
    30_000,
  );
});

test('a project no pool serves shows no pools section', async () => {
  const res = await stack.call('POST', '/v1/projects', {
    ...admin,
    body: {
      id: 'unpooled',
      name: 'unpooled',
      forge: 'github',
      repo: 'acme/unpooled',
      repo_url: 'https://github.com/acme/unpooled.git',
    },
  });
  assert.equal(res.status, 201, res.text);
  const { page } = await newPage(browser);
  await signIn(page, stack, '/projects/unpooled');
  assert.equal(await page.getByRole('heading', { name: 'Runner pools' }).count(), 0);
  assert.equal(await page.locator('[data-pool]').count(), 0);
});
