// `npm run demo -- --keep`: after its table the demo prints the job page's
// link and keeps the stack up; the link opens the finished job in a browser,
// without signing in, with the package task's masked log.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runDemo } from '../../local/demo.ts';
import { launchBrowser, newPage, screenshot } from './support.ts';

const browser = await launchBrowser();

test('the demo kept up prints its job page, which shows the finished job and its logs', async () => {
  const lines: string[] = [];
  let release = () => {};
  const released = new Promise<void>((done) => {
    release = done;
  });
  let pageUrl = '';
  let reached = () => {};
  const kept = new Promise<void>((done) => {
    reached = done;
  });
  const demo = runDemo((line) => lines.push(line), {
    timeoutMs: 90_000,
    keep: async () => {
      pageUrl = /^job page\s+(\S+)$/m.exec(lines.join('\n'))?.[1] ?? '';
      reached();
      await released;
    },
  });
  try {
    // The demo calls keep() once its table and the link are printed (or ends early, failing).
    await Promise.race([kept, demo]);
    const output = lines.join('\n');
    assert.ok(pageUrl, output);
    assert.ok(
      output.indexOf('job page') > output.search(/^task\s+state\s+attempt\s+duration$/m),
      'the link comes after the table',
    );
    const { page } = await newPage(browser);
    const res = await page.goto(pageUrl);
    assert.equal(res?.status(), 200);
    assert.equal(await page.locator('[data-job-state]').getAttribute('data-job-state'), 'success');
    assert.equal(
      await page.locator('[data-task-name="lint"]').getAttribute('data-state'),
      'failed',
    );
    await screenshot(page, 'demo-job-1280x800');
    await page.locator('[data-task-name="package"]').click();
    await page.locator('[data-log]').waitFor();
    assert.match((await page.locator('[data-log]').textContent()) ?? '', /with token \*\*\*/);
    await screenshot(page, 'demo-finished-1280x800');
  } finally {
    release();
  }
  const result = await demo;
  assert.equal(result.jobState, 'success');
  assert.equal(result.pageUrl, pageUrl);
});
