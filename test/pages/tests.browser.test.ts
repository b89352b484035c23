// The job page in a real browser shows what a task's test reports said
// (issue #54): the Tests section, failures first with their messages and
// the flaky test last, and the totals beside the task in the graph.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { testStack } from '../helpers/stack.ts';
import { Fixture } from '../runner/support.ts';
import { launchBrowser, newPage, screenshot, signIn } from './support.ts';

const stack = await testStack(import.meta.filename);
const browser = await launchBrowser();
const fixture = (name: string) =>
  readFileSync(new URL(`../reports/fixtures/${name}`, import.meta.url), 'utf8');

test('the Tests section lists failures first with their messages, and the graph shows the totals', async () => {
  const f = await Fixture.create(
    stack,
    'tests-page',
    `  unit:
    script: ["true"]
    reports:
      junit: ["out/*.xml"]
  lint:
    script: ["true"]
`,
    { 'out/TEST-CartTest.xml': fixture('surefire.xml'), 'out/pytest.xml': fixture('pytest.xml') },
  );
  await f.runner();
  const jobId = await f.trigger();
  assert.equal((await f.finished(jobId)).job.state, 'success');

  const { context, page } = await newPage(browser);
  await signIn(page, stack, `/jobs/${jobId}`);
  const section = page.locator('section#tests');
  await section.waitFor({ timeout: 15_000 });
  assert.match(
    ((await page.locator('[data-tests-total]').textContent()) ?? '').trim(),
    /^4 of 11 tests failed\s+2 failed · 2 errored · 5 passed · 2 skipped · /,
  );
  const unit = section.locator('[data-tests-task="unit"]');
  const items = unit.locator('li[data-test-name]');
  assert.deepEqual(
    await items.evaluateAll((els) =>
      els.map((e) => [e.getAttribute('data-test-name'), e.getAttribute('data-test-kind')]),
    ),
    // Failed and errored first, file by file (out/TEST-… sorts before out/pytest…), then the flaky.
    [
      ['totalsTwoItems', 'failed'],
      ['removesAnItem', 'errored'],
      ['test_reads_dates[2026-01-01]', 'failed'],
      ['test_connects', 'errored'],
      ['checksOut', 'flaky'],
    ],
  );
  const totals = unit.locator('li[data-test-name="totalsTwoItems"]');
  assert.match(
    (await totals.locator('[data-test-message]').textContent()) ?? '',
    /^org\.opentest4j\.AssertionFailedError: expected: <30> but was: <25>/,
  );
  assert.match((await totals.textContent()) ?? '', /org\.example\.shop\.CartTest › totalsTwoItems/);
  assert.equal(await section.locator('[data-tests-task="lint"]').count(), 0);

  // Beside the task in the graph: broken of all; nothing beside a task without reports.
  const node = page.locator('svg a[data-task-name="unit"]');
  assert.equal(await node.locator('[data-tests]').textContent(), '✗ 4/11');
  assert.equal(await page.locator('svg a[data-task-name="lint"] [data-tests]').count(), 0);
  await screenshot(page, 'job-tests');
  await context.close();
});
