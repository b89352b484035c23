import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import { compilePipeline } from '../../lib/pipeline/index.ts';
import { compile, compiled } from './helpers.ts';

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
    const [, matrix, , anchors] = examples;
    const indented = (matrix ?? '').replace(/^/gm, '  ');
    const tasks = compile(`version: 1\ntasks:\n${indented}`).tasks;
    assert.equal(tasks.length, 4);
    const shared = compile(`version: 1\n${anchors ?? ''}`).tasks;
    assert.deepEqual(shared[1]?.script, ['npm run test:e2e']);
    assert.equal(shared[1]?.image, 'node:20');
  });

  test('the include/exclude example runs the four tasks the reference lists, fail_fast on each', () => {
    const indented = (examples[2] ?? '').replace(/^/gm, '  ');
    const tasks = compile(`version: 1\ntasks:\n${indented}`).tasks;
    assert.deepEqual(
      tasks.map((task) => [task.name, task.failFast]),
      [
        ['test (node: 20, os: linux)', true],
        ['test (node: 22, os: linux)', true],
        ['test (node: 22, os: arm)', true],
        ['test (node: 23, os: linux, experimental: true)', true],
      ],
    );
  });

  test('the extends example gives e2e what the reference says', () => {
    const tasks = compile(examples[4] ?? '').tasks;
    assert.deepEqual(
      tasks.map((task) => task.name),
      ['unit', 'e2e'],
    );
    const e2e = tasks[1];
    assert.equal(e2e?.image, 'node:20');
    assert.deepEqual(e2e?.labels, ['big', 'linux']);
    assert.deepEqual(e2e?.env, { CI: '1', NODE_ENV: 'e2e' });
  });

  test('the include example asks for its file, then compiles with it', () => {
    const main = examples[5] ?? '';
    const push = { ref: 'refs/heads/main', event: 'push' } as const;
    assert.deepEqual(compilePipeline(main, push), { toRead: ['ci/tests.yml'] });
    const files = new Map([['ci/tests.yml', { text: examples[6] ?? '' }]]);
    const tasks = compiled(compilePipeline(main, push, files)).tasks;
    assert.deepEqual(
      tasks.map((task) => [task.name, task.image, task.needs]),
      [
        ['build', null, []],
        ['test', 'node:20', ['build']],
      ],
    );
  });

  test('the services example compiles to the service the reference describes', () => {
    const [task] = compile(examples[7] ?? '').tasks;
    assert.deepEqual(task?.services, [
      {
        name: 'db',
        image: 'postgres:16',
        env: { POSTGRES_PASSWORD: 'test' },
        ports: [5432],
        health: 'pg_isready -U postgres',
        healthTimeoutS: 90,
      },
    ]);
  });
});
