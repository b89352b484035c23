// The log's tools on the job page in Chromium (issue #54): each line's time
// behind the Timestamps box, sections folded once finished (GitHub's
// ::group:: and GitLab's section markers) with their durations, script steps
// timed, and a search that finds and highlights matches in the pages of the
// log not yet shown. Line times are the times the chunks arrived; the test
// sets them in the database, so the durations are known.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { claimTask, complete, type Json, startE2E, uploadLog } from '../e2e/calls.ts';
import { launchBrowser, newPage, runningJob, screenshot, signIn } from './support.ts';

const e2e = await startE2E(import.meta.filename, {
  env: { CONDUCTOR_ALLOW_PRIVATE_FORGES: '1' },
  projects: { project: { forge: 'github', id: 'logs', repo: 'acme/logs' } },
});
const { stack } = e2e;
const browser = await launchBrowser();
const ONE = '  build:\n    script: [make]\n';
const ESC = '\u001b';

/** Claims the job's task and stores `chunks` as its log, each arrived at its time; completes it. */
async function taskWithLog(label: string, chunks: { data: string; at: string }[]) {
  const job = await runningJob(e2e, label, ONE);
  const task: Record<string, Json> = await claimTask(stack, job.token);
  let offset = 0;
  for (const c of chunks) {
    const res = await uploadLog(stack, job.token, task.id as string, {
      lease_id: task.lease_id,
      offset,
      data: c.data,
    });
    assert.equal(res.status, 200, res.text);
    await stack.context.pool.query(
      'update log_chunks set created_at = $3 where task_id = $1 and byte_offset = $2',
      [task.id, offset, c.at],
    );
    offset += Buffer.byteLength(c.data);
  }
  const done = await complete(stack, job.token, task.id as string, {
    lease_id: task.lease_id,
    outcome: 'success',
    exit_code: 0,
  });
  assert.equal(done.status, 200, done.text);
  return { jobId: job.jobId, taskId: task.id as string };
}

const SMALL = [
  {
    at: '2026-01-01T10:00:00Z',
    data: [
      '+ make build',
      '::group::Install deps',
      'installing a',
      'installing b',
      '::endgroup::',
      `${ESC}[0Ksection_start:1700000000:compile[collapsed=true]\r${ESC}[0KCompiling sources`,
      'compiling x.c',
      `${ESC}[0Ksection_end:1700000042:compile\r${ESC}[0K`,
      '',
    ].join('\n'),
  },
  { at: '2026-01-01T10:00:07Z', data: '+ make test\nall tests passed\n' },
];

test("Timestamps shows each line's time; finished sections are folded with their durations, open on a click; steps show theirs", async () => {
  const { jobId, taskId } = await taskWithLog('logtime', SMALL);
  const { page } = await newPage(browser);
  await signIn(page, stack);
  await page.goto(`${stack.url}/jobs/${jobId}?task=${taskId}`);
  const line = (text: string) => page.locator('[data-log] .l', { hasText: text });

  // Times are there but hidden until asked for.
  const firstTime = line('+ make build').locator('.ts');
  assert.equal(await firstTime.isVisible(), false);
  await page.getByLabel('Timestamps').check();
  assert.equal(await firstTime.isVisible(), true);
  assert.equal(await firstTime.getAttribute('data-ts'), '10:00:00');
  // Shown by CSS: not part of the line's text (copied, searched).
  assert.equal(await line('+ make build').textContent(), '+ make build\n');
  assert.equal(await line('all tests passed').locator('.ts').getAttribute('data-ts'), '10:00:07');

  // Sections: titled by their names, folded, with durations (GitLab's from its markers).
  const group = line('Install deps');
  assert.equal(await group.isVisible(), true);
  assert.equal(await line('installing a').isVisible(), false);
  assert.equal(await group.locator('.dur').getAttribute('data-dur'), '0s');
  const compile = line('Compiling sources');
  assert.equal(await compile.locator('.dur').getAttribute('data-dur'), '42s');
  assert.equal(await line('compiling x.c').isVisible(), false);
  assert.ok(!((await compile.textContent()) ?? '').includes('section_start'));
  await screenshot(page, 'log-sections-folded');

  await group.locator('button.fold').click();
  assert.equal(await line('installing a').isVisible(), true);
  assert.equal(await line('compiling x.c').isVisible(), false, 'the other section stays folded');
  await group.locator('button.fold').click();
  assert.equal(await line('installing a').isVisible(), false);

  // Each script line is a step: `make build` ran until `make test` began.
  assert.equal(await line('+ make build').locator('.dur').getAttribute('data-dur'), '7s');
  assert.equal(await line('+ make test').locator('.dur').getAttribute('data-dur'), '0s');

  // The box is remembered for the next page.
  await page.reload();
  assert.equal(await page.locator('[data-log] .l .ts').first().isVisible(), true);
  await screenshot(page, 'log-timestamps');

  // The raw log, with times on request (the page's download and the API's).
  const raw = await page.evaluate(
    async (href) => (await fetch(href)).text(),
    `/jobs/${jobId}/raw?task=${taskId}&timestamps=1`,
  );
  assert.match(
    raw,
    /^2026-01-01T10:00:00\.000Z \+ make build\n2026-01-01T10:00:00\.000Z ::group::Install deps\n/,
  );
  assert.match(raw, /\n2026-01-01T10:00:07\.000Z all tests passed\n$/);
  const api = await stack.call('GET', `/v1/tasks/${taskId}/log?timestamps=1&offset=5`, {
    token: stack.adminToken,
  });
  assert.equal(api.status, 200);
  // A page that starts inside a line leaves that line as it is.
  assert.match(api.text, /^e build\n2026-01-01T10:00:00\.000Z ::group::/);
  const plain = await stack.call('GET', `/v1/tasks/${taskId}/log`, { token: stack.adminToken });
  assert.match(plain.text, /^\+ make build\n::group::/);
  const bad = await stack.call('GET', `/v1/tasks/${taskId}/log?timestamps=yes`, {
    token: stack.adminToken,
  });
  assert.equal(bad.status, 400);
  assert.match(bad.body.error.message, /timestamps/);
});

test('search finds matches in pages of the log not yet shown, highlights them, and steps through them with next and previous', async () => {
  const filler = (from: number, n: number) =>
    Array.from(
      { length: n },
      (_, i) => `filler line ${String(from + i).padStart(7, '0')} ..........................\n`,
    ).join('');
  const { jobId, taskId } = await taskWithLog('logsearch', [
    {
      at: '2026-01-01T11:00:00Z',
      data: `+ make\n${ESC}[0Ksection_start:1700000000:early\r${ESC}[0KEarly section\nthe needle in the first page\n${ESC}[0Ksection_end:1700000003:early\r${ESC}[0K\n`,
    },
    { at: '2026-01-01T11:00:01Z', data: filler(0, 12_000) },
    { at: '2026-01-01T11:00:02Z', data: filler(12_000, 12_000) },
    { at: '2026-01-01T11:00:03Z', data: 'a Needle at the end\ndone\n' },
  ]);
  const { page } = await newPage(browser);
  await signIn(page, stack);
  await page.goto(`${stack.url}/jobs/${jobId}?task=${taskId}`);
  const log = page.locator('[data-log]');
  assert.equal(
    await log.locator('.l', { hasText: 'the needle in the first page' }).count(),
    0,
    'the first page is not shown yet',
  );

  const box = page.getByLabel('search the log');
  await box.fill('needle');
  await box.press('Enter');
  const count = page.locator('[data-search-count]');
  await page.locator('[data-search-count]', { hasText: ' of ' }).waitFor({ timeout: 30_000 });
  assert.equal(await count.textContent(), '1 of 2');
  const current = log.locator('mark.hit.cur');
  assert.equal(await current.textContent(), 'needle');
  // The match was in a folded section: it is unfolded to show it.
  assert.equal(await current.isVisible(), true);
  assert.equal(await log.locator('mark.hit').count(), 2);
  await screenshot(page, 'log-search');

  await page.locator('[data-search-next]').click();
  assert.equal(await count.textContent(), '2 of 2');
  assert.equal(await log.locator('mark.hit.cur').textContent(), 'Needle');
  await page.locator('[data-search-next]').click();
  assert.equal(await count.textContent(), '1 of 2', 'next wraps around');
  await page.locator('[data-search-prev]').click();
  assert.equal(await count.textContent(), '2 of 2');

  await box.fill('no such text');
  await box.press('Enter');
  await page.locator('[data-search-count]', { hasText: 'no matches' }).waitFor();
  assert.equal(await log.locator('mark.hit').count(), 0);
  // The line numbers run on across the pages loaded for the search.
  assert.equal(await log.locator('.l').first().getAttribute('id'), 'L1');
});
