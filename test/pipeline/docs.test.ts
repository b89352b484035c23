import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import { compile } from './helpers.ts';

// The reference is what users copy from, so its examples must compile as it says they do.
const reference = readFileSync(new URL('../../docs/pipeline.md', import.meta.url), 'utf8');
const examples = [...reference.matchAll(/```yaml\n([\s\S]*?)```/g)].map((match) => match[1] ?? '');

describe('docs/pipeline.md', () => {
  test('the complete example compiles into the tasks the reference lists', () => {
    const text = examples[0] ?? '';
    const onMain = compile(text, { ref: 'refs/heads/main', event: 'push' });
    assert.equal(onMain.name, 'backend');
    assert.deepEqual(
      onMain.tasks.map((task) => task.name),
      [
        'build',
        'lint',
        'test (node: 18, os: linux)',
        'test (node: 18, os: arm)',
        'test (node: 20, os: linux)',
        'test (node: 20, os: arm)',
        'test (node: 22, os: linux)',
        'test (node: 22, os: arm)',
        'publish',
      ],
    );
    const onBranch = compile(text, { ref: 'refs/heads/feature', event: 'push' });
    assert.equal(onBranch.tasks.at(-1)?.name, 'test (node: 22, os: arm)');
  });

  test('the matrix and anchor examples compile inside a pipeline', () => {
    const [, matrix, anchors] = examples;
    const indented = (matrix ?? '').replace(/^/gm, '  ');
    const tasks = compile(`version: 1\ntasks:\n${indented}`).tasks;
    assert.equal(tasks.length, 4);
    const shared = compile(`version: 1\n${anchors ?? ''}`).tasks;
    assert.deepEqual(shared[1]?.script, ['npm run test:e2e']);
    assert.equal(shared[1]?.image, 'node:20');
  });
});
