import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runDemo } from '../../local/demo.ts';

test('npm run demo runs the sample pipeline to success on two runners and shows the table', async () => {
  const lines: string[] = [];
  const result = await runDemo((line) => lines.push(line), { timeoutMs: 90_000 });
  const output = lines.join('\n');
  assert.equal(result.jobState, 'success', output);
  const states = Object.fromEntries(result.tasks.map((t) => [t.name, t.state]));
  assert.deepEqual(states, {
    build: 'success',
    'test (node: 20)': 'success',
    'test (node: 22)': 'success',
    lint: 'failed',
    package: 'success',
  });
  // The output passed downstream, and the secret masked in the stored log.
  assert.match(result.packageLog, /packaging 1\.0\.1 with token \*\*\*/);
  assert.doesNotMatch(output, /demo-deploy-token-1234/);
  assert.match(output, /^task\s+state\s+attempt\s+duration$/m);
  assert.match(output, /^lint\s+failed\s+1\s+\d+\.\ds$/m);
  assert.match(output, /^job #1: success$/m);
  // A live line for each state change, e.g. the build starting and finishing.
  assert.match(output, /build\s+running/);
  assert.match(output, /build\s+success/);
  // The stack is gone when the demo ends: no link to a page that would not open.
  assert.doesNotMatch(output, /\/jobs\//);
  assert.match(output, /^job page {5}npm run demo -- --keep keeps the stack up and prints it/m);
});

test('npm run demo -- --keep prints the job page link while the stack is up, and it opens (#48)', async () => {
  const lines: string[] = [];
  let status = 0;
  const result = await runDemo((line) => lines.push(line), {
    timeoutMs: 90_000,
    keep: async () => {
      const link = lines
        .find((l) => l.startsWith('job page'))
        ?.slice('job page'.length)
        .trim();
      status = (await fetch(link!)).status;
    },
  });
  assert.equal(result.jobState, 'success', lines.join('\n'));
  assert.ok(lines.includes(`job page     ${result.pageUrl}`), lines.join('\n'));
  assert.equal(status, 200, 'the link opens the page while the stack is kept up');
});
