// The job page in a real browser lists a task's artifacts and cache restore,
// and its download link gives the file itself.
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { test } from 'node:test';
import { testStack } from '../helpers/stack.ts';
import { Fixture } from '../runner/support.ts';
import { launchBrowser, newPage, screenshot, signIn } from './support.ts';

const stack = await testStack(import.meta.filename);
const browser = await launchBrowser();

test('the job page lists an artifact with its size and expiry, shows the cache miss, and downloads the artifact', async () => {
  const f = await Fixture.create(
    stack,
    'page',
    `  build:
    script:
      - mkdir -p dist deps && echo "hello from build" > dist/app.txt && echo x > deps/x
    artifacts:
      paths: ["dist/**"]
      expire_in: 3d
    cache:
      key: "deps-{{ hash 'lock.txt' }}"
      paths: [deps]
`,
    { 'lock.txt': 'one\n' },
  );
  await f.runner();
  const jobId = await f.trigger();
  assert.equal((await f.finished(jobId)).job.state, 'success');

  const { context, page } = await newPage(browser);
  await signIn(page, stack, `/jobs/${jobId}`);
  const row = page.locator('tr[data-artifact="dist/app.txt"]');
  await row.waitFor({ timeout: 15_000 });
  const cells = await row.locator('td').allInnerTexts();
  assert.equal(cells[0], 'build');
  assert.equal(cells[1], 'dist/app.txt');
  assert.equal(cells[2], '17 bytes');
  const expires = new Date(Date.now() + 3 * 86_400_000).toISOString().slice(0, 10);
  assert.equal(cells[3], expires);
  const cache = page.locator('tr[data-cache-result]');
  assert.equal(await cache.getAttribute('data-cache-result'), 'miss');
  assert.match((await cache.textContent()) ?? '', /cache miss/);
  await screenshot(page, 'job-artifacts');

  const [download] = await Promise.all([page.waitForEvent('download'), row.locator('a').click()]);
  assert.equal(download.suggestedFilename(), 'app.txt');
  const path = await download.path();
  assert.equal(await readFile(path!, 'utf8'), 'hello from build\n');
  await context.close();

  // Without a session the link does not give the file away.
  const anonymous = await fetch(`${stack.url}/jobs/${jobId}/artifacts/${jobId}`, {
    redirect: 'manual',
  });
  assert.equal(anonymous.status, 302);
  assert.match(anonymous.headers.get('location') ?? '', /^\/login/);
});
