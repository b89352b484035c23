// Test reports through the runner's routes (issue #54), called as a runner
// would: the commit status of a job whose tasks reported tests says "2 of
// 5 tests failed"; a test that failed in one attempt and passed in the
// task's next is flaky; the routes are lease-checked and bounded.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import { purgeStorage } from '../../lib/app/artifacts.ts';
import { claim, complete } from '../e2e/calls.ts';
import type { TestStack } from '../helpers/stack.ts';
import { projectOn, pushSettled, statusesSettled, statusStack } from './support.ts';

const { fake, stack } = await statusStack(import.meta.filename);
const admin = { token: stack.adminToken };

type Claimed = { id: string; lease_id: string };

/** Uploads one report as the runner does: begin, PUT the bytes, commit. Answers the commit. */
async function upload(s: TestStack, token: string, task: Claimed, path: string, xml: string) {
  const bytes = Buffer.from(xml);
  const begin = await s.call('POST', `/v1/runner/tasks/${task.id}/reports`, {
    token,
    body: {
      lease_id: task.lease_id,
      path,
      size: bytes.length,
      sha256: createHash('sha256').update(bytes).digest('hex'),
    },
  });
  assert.equal(begin.status, 200, begin.text);
  const put = await fetch(new URL(begin.body.upload.parts[0].url, s.url), {
    method: 'PUT',
    body: bytes,
  });
  assert.equal(put.status < 300, true, `PUT answered ${put.status}`);
  const commit = await s.call(
    'POST',
    `/v1/runner/tasks/${task.id}/reports/${begin.body.report.id}/commit`,
    { token, body: { lease_id: task.lease_id } },
  );
  assert.equal(commit.status, 200, commit.text);
  return commit.body.report;
}

const suite = (cases: string) => `<testsuite name="shop">${cases}</testsuite>`;
const pass = (name: string) => `<testcase classname="Cart" name="${name}" time="0.5"/>`;
const fail = (name: string, why: string) =>
  `<testcase classname="Cart" name="${name}" time="0.25"><failure message="${why}">at Cart.java:12</failure></testcase>`;

test('the final status says how many tests failed when the job reported tests', async () => {
  const { p, commit } = await projectOn(
    stack,
    fake,
    'github',
    'tests-status',
    '  unit:\n    script: [make test]\n    reports:\n      junit: [out/*.xml]\n',
  );
  const { jobId } = await pushSettled(stack, fake, p, commit);
  const claimed = await claim(stack, p.runner);
  assert.equal(claimed.status, 200, claimed.text);
  const task = claimed.body.task;
  assert.deepEqual(task.reports, { junit: ['out/*.xml'] });
  const report = await upload(
    stack,
    p.runner,
    task,
    'out/TEST-Cart.xml',
    suite(
      pass('adds') +
        pass('removes') +
        pass('empties') +
        fail('totals', 'expected 30') +
        fail('taxes', 'expected 3'),
    ),
  );
  assert.deepEqual(report.totals, { passed: 3, failed: 2, errored: 0, skipped: 0, time_s: 2 });
  const done = await complete(stack, p.runner, task.id, {
    lease_id: task.lease_id,
    outcome: 'failed',
    exit_code: 1,
  });
  assert.equal(done.status, 200, done.text);
  const posts = await statusesSettled(stack, fake, jobId, commit, 2);
  const last = posts.at(-1)!.body as { state: string; description: string };
  assert.equal(last.state, 'failure');
  assert.equal(last.description, '2 of 5 tests failed; tasks 0 passed, 1 failed');
});

test('a test that failed in one attempt and passed in the next is flaky; the routes are lease-checked and bounded', async () => {
  const { p, commit } = await projectOn(
    stack,
    fake,
    'github',
    'tests-flaky',
    '  unit:\n    script: [make test]\n    reports:\n      junit: [out/*.xml]\n',
  );
  const { jobId } = await pushSettled(stack, fake, p, commit);
  const first = (await claim(stack, p.runner)).body.task as Claimed;
  await upload(
    stack,
    p.runner,
    first,
    'out/a.xml',
    suite(pass('adds') + fail('checks out', 'connection refused')),
  );

  // Bounds and the lease: too large a file, and another lease, are refused.
  const tooLarge = await stack.call('POST', `/v1/runner/tasks/${first.id}/reports`, {
    token: p.runner,
    body: {
      lease_id: first.lease_id,
      path: 'out/big.xml',
      size: 10 * 1024 * 1024 + 1,
      sha256: 'a'.repeat(64),
    },
  });
  assert.equal(tooLarge.status, 413);
  assert.match(tooLarge.body.error.message, /at most 10485760 bytes are read/);
  const otherLease = await stack.call('POST', `/v1/runner/tasks/${first.id}/reports`, {
    token: p.runner,
    body: { lease_id: crypto.randomUUID(), path: 'out/b.xml', size: 1, sha256: 'a'.repeat(64) },
  });
  assert.equal(otherLease.status, 409);
  const badPath = await stack.call('POST', `/v1/runner/tasks/${first.id}/reports`, {
    token: p.runner,
    body: { lease_id: first.lease_id, path: '../etc/passwd', size: 1, sha256: 'a'.repeat(64) },
  });
  assert.equal(badPath.status, 400);
  assert.match(badPath.body.error.message, /path/);

  // The attempt is lost to the runner (transient): the task runs again.
  const again = await complete(stack, p.runner, first.id, {
    lease_id: first.lease_id,
    outcome: 'failed',
    transient: true,
    error: 'the runner was lost',
  });
  assert.equal(again.body.state, 'queued');
  const second = (await claim(stack, p.runner)).body.task as Claimed & { attempt: number };
  assert.equal(second.attempt, 2);
  await upload(stack, p.runner, second, 'out/a.xml', suite(pass('adds') + pass('checks out')));
  await complete(stack, p.runner, second.id, {
    lease_id: second.lease_id,
    outcome: 'success',
    exit_code: 0,
  });

  const tests = await stack.call('GET', `/v1/jobs/${jobId}/tests`, admin);
  assert.equal(tests.status, 200, tests.text);
  assert.deepEqual(tests.body.totals, { passed: 2, failed: 0, errored: 0, skipped: 0, time_s: 1 });
  const [task] = tests.body.tasks;
  assert.equal(task.attempt, 2);
  assert.deepEqual(task.failures, [
    {
      suite: 'shop',
      name: 'checks out',
      classname: 'Cart',
      message: 'connection refused\nat Cart.java:12',
      kind: 'passed',
      flaky: true,
    },
  ]);
});

test('a report whose upload never committed (a runner that died) is deleted by the sweep after a day', async () => {
  const { p, commit } = await projectOn(
    stack,
    fake,
    'github',
    'tests-stale',
    '  unit:\n    script: [make test]\n    reports:\n      junit: [out/*.xml]\n',
  );
  await pushSettled(stack, fake, p, commit);
  const task = (await claim(stack, p.runner)).body.task as Claimed;
  const begin = await stack.call('POST', `/v1/runner/tasks/${task.id}/reports`, {
    token: p.runner,
    body: { lease_id: task.lease_id, path: 'out/a.xml', size: 3, sha256: 'a'.repeat(64) },
  });
  assert.equal(begin.status, 200, begin.text);
  const pending = () =>
    stack.context.pool
      .query('select 1 from test_reports where id = $1', [begin.body.report.id])
      .then((r) => r.rowCount);
  assert.equal(
    (await purgeStorage(stack.context)).reports_purged,
    0,
    'an upload under way is kept',
  );
  await stack.context.pool.query(
    `update test_reports set created_at = now() - interval '25 hours' where id = $1`,
    [begin.body.report.id],
  );
  assert.equal((await purgeStorage(stack.context)).reports_purged, 1);
  assert.equal(await pending(), 0);
});
