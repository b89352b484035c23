// Reading JUnit XML (issue #54, lib/reports/junit.ts): the shapes the common
// tools write, read to totals and failures; and hostile files (billion
// laughs, an external entity, 100,000 cases, a huge attribute, deep
// nesting, a cut-off file) refused or cut within bounds, quickly, with a
// reason a person can act on.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import {
  MESSAGE_MAX_CHARS,
  MESSAGE_MAX_LINES,
  NAME_MAX_CHARS,
  parseJUnit,
  REPORT_MAX_CASES,
  REPORT_MAX_FAILURES,
  ReportError,
} from '../../lib/reports/index.ts';

const fixture = (name: string) => readFileSync(new URL(`./fixtures/${name}`, import.meta.url));
const xml = (text: string) => Buffer.from(text, 'utf8');

/** Throws unless `fn` throws a ReportError; answers its message. */
function refusal(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof ReportError, `expected a ReportError, got ${err}`);
    return err.message;
  }
  assert.fail('the report was read');
}

/** The environment of a test run of its own: with NODE_TEST_CONTEXT, node:test would skip the files. */
function ownRun(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  delete env.NODE_TEST_CONTEXT;
  return env;
}

describe('the common shapes', () => {
  test('Surefire: failures, errors, skipped and a flaky test, with their messages', () => {
    const r = parseJUnit(fixture('surefire.xml'));
    assert.deepEqual(
      { ...r.totals, time_s: Math.round(r.totals.time_s * 1000) },
      {
        passed: 3,
        failed: 1,
        errored: 1,
        skipped: 1,
        time_s: 231,
      },
    );
    assert.deepEqual(
      r.failures.map((f) => [f.kind, f.flaky, f.suite, f.name, f.classname]),
      [
        [
          'failed',
          false,
          'org.example.shop.CartTest',
          'totalsTwoItems',
          'org.example.shop.CartTest',
        ],
        [
          'errored',
          false,
          'org.example.shop.CartTest',
          'removesAnItem',
          'org.example.shop.CartTest',
        ],
        ['passed', true, 'org.example.shop.CartTest', 'checksOut', 'org.example.shop.CartTest'],
      ],
    );
    assert.match(
      r.failures[0]!.message,
      /^org\.opentest4j\.AssertionFailedError: expected: <30> but was: <25>\n/,
    );
    assert.match(r.failures[0]!.message, /CartTest\.java:42/);
    assert.match(r.failures[1]!.message, /"this\.items" is null/);
    // What the test printed (system-out) is never read as tests.
    assert.equal(r.totals.passed + r.totals.failed + r.totals.errored + r.totals.skipped, 6);
  });

  test('pytest: the message attribute and the trace, character references decoded', () => {
    const r = parseJUnit(fixture('pytest.xml'));
    assert.deepEqual(
      { ...r.totals, time_s: 0 },
      { passed: 2, failed: 1, errored: 1, skipped: 1, time_s: 0 },
    );
    const [failed, errored] = r.failures;
    assert.equal(failed!.suite, 'pytest');
    assert.equal(failed!.classname, 'tests.test_parser');
    assert.equal(failed!.name, 'test_reads_dates[2026-01-01]');
    assert.match(
      failed!.message,
      /^AssertionError: assert datetime\.date\(2026, 1, 2\) == datetime\.date\(2026, 1, 1\)\n \+ {2}where/,
    );
    assert.match(failed!.message, />\s+assert parse\(value\) == date\(2026, 1, 1\)/);
    assert.equal(errored!.kind, 'errored');
    assert.match(errored!.message, /ConnectionRefusedError/);
  });

  test('jest-junit: the file attribute, and a failure with no message attribute', () => {
    const r = parseJUnit(fixture('jest-junit.xml'));
    assert.deepEqual(
      { ...r.totals, time_s: 0 },
      { passed: 2, failed: 1, errored: 0, skipped: 1, time_s: 0 },
    );
    assert.equal(r.failures[0]!.suite, 'src/cart.test.js');
    assert.equal(r.failures[0]!.name, 'cart totals with tax');
    assert.equal(r.failures[0]!.file, 'src/cart.test.js');
    assert.match(r.failures[0]!.message, /^Error: expect\(received\)\.toBe\(expected\)/);
    assert.match(r.failures[0]!.message, /Expected: 33\nReceived: 30/);
  });

  test('go-junit-report: suites under testsuites, properties and output left alone', () => {
    const r = parseJUnit(fixture('go-junit-report.xml'));
    assert.deepEqual(
      { ...r.totals, time_s: 0 },
      { passed: 2, failed: 1, errored: 0, skipped: 0, time_s: 0 },
    );
    assert.equal(r.failures[0]!.suite, 'example.com/shop/cart');
    assert.equal(r.failures[0]!.name, 'TestTotal');
    assert.equal(r.failures[0]!.message, 'Failed\ncart_test.go:27: total = 25, want 30');
  });

  test('node --test --test-reporter=junit, run here on a small suite with a failure', (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'junit-node-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    writeFileSync(
      join(dir, 'cart.test.mjs'),
      [
        "import { describe, test } from 'node:test';",
        "import assert from 'node:assert/strict';",
        "describe('cart', () => {",
        "  test('adds', () => assert.equal(1 + 1, 2));",
        "  test('totals', () => assert.equal(10 + 15, 30, 'the total'));",
        "  test('later', { skip: 'not yet' }, () => {});",
        '});',
        "test('top level', () => {});",
      ].join('\n'),
    );
    const run = spawnSync(
      process.execPath,
      [
        '--test',
        '--test-reporter=junit',
        '--test-reporter-destination=report.xml',
        'cart.test.mjs',
      ],
      { cwd: dir, encoding: 'utf8', env: ownRun() },
    );
    assert.equal(run.status, 1, run.stderr);
    const r = parseJUnit(readFileSync(join(dir, 'report.xml')));
    assert.deepEqual(
      { ...r.totals, time_s: 0 },
      { passed: 2, failed: 1, errored: 0, skipped: 1, time_s: 0 },
    );
    assert.equal(r.failures.length, 1);
    assert.equal(r.failures[0]!.suite, 'cart');
    assert.equal(r.failures[0]!.name, 'totals');
    assert.match(r.failures[0]!.message, /the total/);
    assert.match(r.failures[0]!.message, /25 !== 30/);
  });
});

describe('hostile and broken reports', () => {
  test('billion laughs: refused at the DOCTYPE, nothing expanded, at once', () => {
    const started = performance.now();
    const message = refusal(() => parseJUnit(fixture('billion-laughs.xml')));
    assert.match(message, /declares XML entities/);
    assert.ok(performance.now() - started < 500, 'refused in under half a second');
  });

  test('an external entity is never read: refused', () => {
    assert.match(
      refusal(() => parseJUnit(fixture('external-entity.xml'))),
      /declares XML entities|External entities are not supported/,
    );
  });

  test('an entity nobody declared stays as written; only XML entities and references decode', () => {
    const r = parseJUnit(
      xml(
        '<testsuite name="a &amp; b &#x41;&#66; &lol9; &nbsp;"><testcase name="x"><failure message="&lt;&gt;&quot;&apos;&#0;"/></testcase></testsuite>',
      ),
    );
    assert.equal(r.failures[0]!.suite, 'a & b AB &lol9; &nbsp;');
    assert.equal(r.failures[0]!.message, '<>"\'&#0;');
  });

  test('100,000 test cases: refused before parsing, quickly', () => {
    const cases = '<testcase name="t" classname="c"/>'.repeat(100_000);
    const started = performance.now();
    const message = refusal(() => parseJUnit(xml(`<testsuite name="s">${cases}</testsuite>`)));
    assert.equal(
      message,
      `the report holds more than ${REPORT_MAX_CASES} test cases; at most ${REPORT_MAX_CASES} are read per file (split it)`,
    );
    assert.ok(performance.now() - started < 1000, 'refused in under a second');
  });

  test(`${REPORT_MAX_CASES} cases are read; the time it takes is printed`, () => {
    const cases = Array.from(
      { length: REPORT_MAX_CASES },
      (_, i) =>
        `<testcase name="t${i}" classname="c" time="0.001">${i % 10 === 0 ? '<failure message="no"/>' : ''}</testcase>`,
    ).join('');
    const started = performance.now();
    const r = parseJUnit(xml(`<testsuite name="s">${cases}</testsuite>`));
    console.log(
      `# ${REPORT_MAX_CASES} cases read in ${Math.round(performance.now() - started)} ms`,
    );
    assert.equal(r.totals.failed, REPORT_MAX_CASES / 10);
    assert.equal(r.totals.passed, REPORT_MAX_CASES - REPORT_MAX_CASES / 10);
    assert.equal(r.failures.length, REPORT_MAX_FAILURES);
    assert.equal(
      r.note,
      `${REPORT_MAX_CASES / 10} failures; the first ${REPORT_MAX_FAILURES} are kept, the rest counted`,
    );
  });

  test('a huge attribute and a long message are cut to their bounds', () => {
    const huge = 'x'.repeat(2_000_000);
    const lines = Array.from({ length: 500 }, (_, i) => `line ${i}`).join('\n');
    const r = parseJUnit(
      xml(
        `<testsuite name="${huge}"><testcase name="${huge}"><failure message="m">${lines}</failure></testcase><testcase name="b"><error>${huge}</error></testcase></testsuite>`,
      ),
    );
    assert.equal(r.failures[0]!.suite.length, NAME_MAX_CHARS);
    assert.equal(r.failures[0]!.name.length, NAME_MAX_CHARS);
    assert.equal(r.failures[0]!.message.split('\n').length, MESSAGE_MAX_LINES + 1);
    assert.match(r.failures[0]!.message, /^m\nline 0\n/);
    assert.equal(r.failures[1]!.message.length, MESSAGE_MAX_CHARS);
  });

  test('a file over the size bound is refused unread', () => {
    const message = refusal(() => parseJUnit(new Uint8Array(10 * 1024 * 1024 + 1)));
    assert.match(message, /at most 10485760 bytes are read/);
  });

  test('deep nesting is refused, not a stack overflow', () => {
    const deep = `${'<testsuite name="s">'.repeat(5000)}${'</testsuite>'.repeat(5000)}`;
    assert.match(
      refusal(() => parseJUnit(xml(deep))),
      /nest|nested/i,
    );
  });

  test('a file cut short names its line', () => {
    assert.match(
      refusal(() => parseJUnit(fixture('truncated.xml'))),
      /^not well-formed XML at line \d+: /,
    );
  });

  test('XML that is not a JUnit report says what it found', () => {
    assert.equal(
      refusal(() => parseJUnit(xml('<?xml version="1.0"?><project><name>x</name></project>'))),
      'not a JUnit report: the root element is <project>, not <testsuites> or <testsuite>',
    );
    assert.match(
      refusal(() => parseJUnit(xml('not xml at all'))),
      /not a JUnit report|not well-formed/,
    );
  });
});
