// Test reports through the real reference runner against the local stack
// (issue #54): a task runs `node --test --test-reporter=junit` on a small
// suite with a failure, its report and a Surefire-shaped one are uploaded
// after the failed script, read by the control plane, and shown by
// `GET /v1/jobs/{id}/tests`; a hostile report beside them fails only its
// own reading, with a note, and the task's outcome is the script's.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { testTotals } from '../../lib/app/reports.ts';
import { testStack } from '../helpers/stack.ts';
import { Fixture } from '../runner/support.ts';

const stack = await testStack(import.meta.filename);
const admin = { token: stack.adminToken };
const fixture = (name: string) =>
  readFileSync(new URL(`../reports/fixtures/${name}`, import.meta.url), 'utf8');

const SUITE = `import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
describe('cart', () => {
  test('adds', () => assert.equal(1 + 1, 2));
  test('totals', () => assert.equal(10 + 15, 30, 'the total'));
  test('later', { skip: 'not yet' }, () => {});
});
test('top level', () => {});
`;

test('a failed script still uploads its reports: totals, failures with messages, a flaky test and a hostile file noted', async () => {
  const f = await Fixture.create(
    stack,
    'junit',
    `  unit:
    script:
      - mkdir -p reports
      - env -u NODE_TEST_CONTEXT node --test --test-reporter=junit --test-reporter-destination=reports/node.xml cart.test.mjs
    reports:
      junit: ["reports/*.xml", "java/TEST-*.xml", "hostile/*.xml"]
  lint:
    script: ["true"]
`,
    {
      'cart.test.mjs': SUITE,
      'java/TEST-org.example.shop.CartTest.xml': fixture('surefire.xml'),
      'hostile/laughs.xml': fixture('billion-laughs.xml'),
    },
  );
  await f.runner();
  const jobId = await f.trigger();
  const view = await f.finished(jobId, 60_000);
  assert.equal(view.job.state, 'failed', JSON.stringify(view.tasks));
  const unit = view.tasks.find((t) => t.name === 'unit')!;
  assert.equal(unit.state, 'failed', "the outcome is the script's");
  assert.equal(unit.exit_code, 1);

  const log = await f.log(unit.id);
  assert.match(log, /test report reports\/node\.xml: 2 passed, 1 failed, 1 skipped/);
  assert.match(
    log,
    /test report java\/TEST-org\.example\.shop\.CartTest\.xml: 3 passed, 1 failed, 1 errored, 1 skipped/,
  );
  assert.match(log, /test report hostile\/laughs\.xml: the report declares XML entities/);

  const tests = await stack.call('GET', `/v1/jobs/${jobId}/tests`, admin);
  assert.equal(tests.status, 200, tests.text);
  assert.deepEqual(
    { ...tests.body.totals, time_s: typeof tests.body.totals.time_s },
    { passed: 5, failed: 2, errored: 1, skipped: 2, time_s: 'number' },
  );
  assert.equal(tests.body.tasks.length, 1, 'lint reported nothing');
  const task = tests.body.tasks[0];
  assert.equal(task.task_id, unit.id);
  assert.equal(task.task_name, 'unit');
  assert.deepEqual(
    task.failures.map((x: { suite: string; name: string; flaky?: boolean }) => [
      x.suite,
      x.name,
      x.flaky ?? false,
    ]),
    [
      ['org.example.shop.CartTest', 'totalsTwoItems', false],
      ['org.example.shop.CartTest', 'removesAnItem', false],
      ['cart', 'totals', false],
      ['org.example.shop.CartTest', 'checksOut', true],
    ],
  );
  const nodeFailure = task.failures.find((x: { name: string }) => x.name === 'totals');
  assert.match(nodeFailure.message, /the total/);
  assert.match(nodeFailure.message, /25 !== 30/);
  const hostile = task.reports.find((r: { path: string }) => r.path === 'hostile/laughs.xml');
  assert.equal(hostile.state, 'failed');
  assert.match(hostile.note, /^hostile\/laughs\.xml: the report declares XML entities/);

  // What notifications read (lib/app/reports.ts testTotals), and nothing for a job without reports.
  assert.deepEqual(await testTotals(stack.context, jobId), tests.body.totals);
  const missing = await stack.call(
    'GET',
    '/v1/jobs/00000000-0000-4000-8000-000000000000/tests',
    admin,
  );
  assert.equal(missing.status, 404);
  assert.equal((await stack.call('GET', `/v1/jobs/${jobId}/tests`)).status, 401);
});
