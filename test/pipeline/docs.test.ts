import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import { compilePipeline } from '../../lib/pipeline/index.ts';
import { compile, compiled } from './helpers.ts';

// The reference is what users copy from, so its examples must compile as it says they do.
const reference = readFileSync(new URL('../../docs/pipeline.md', import.meta.url), 'utf8');
// Examples are found by the heading they sit under, so a new section elsewhere
// in the reference never shifts which example a test reads.
const sections = reference.split(/^(?=#{2,3} )/m);
function example(heading: string, index = 0): string {
  const section = sections.find((s) => s.slice(0, s.indexOf('\n')).includes(heading));
  assert.ok(section, `docs/pipeline.md has a section "${heading}"`);
  const blocks = [...section.matchAll(/```yaml\n([\s\S]*?)```/g)].map((match) => match[1] ?? '');
  assert.ok(blocks.length > index, `the section "${heading}" has example ${index + 1}`);
  return blocks[index] ?? '';
}

describe('docs/pipeline.md', () => {
  test('the complete example compiles into the tasks the reference lists', () => {
    const text = example('A complete example');
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
    const matrix = example('## `matrix`');
    const anchors = example('YAML features');
    const indented = (matrix ?? '').replace(/^/gm, '  ');
    const tasks = compile(`version: 1\ntasks:\n${indented}`).tasks;
    assert.equal(tasks.length, 4);
    const shared = compile(`version: 1\n${anchors ?? ''}`).tasks;
    assert.deepEqual(shared[1]?.script, ['npm run test:e2e']);
    assert.equal(shared[1]?.image, 'node:20');
  });

  test('the include/exclude example runs the four tasks the reference lists, fail_fast on each', () => {
    const indented = example('`exclude`, `include` and `fail_fast`').replace(/^/gm, '  ');
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
    const tasks = compile(example('Hidden tasks and `extends`')).tasks;
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
    const main = example('`include`: tasks from more files');
    const push = { ref: 'refs/heads/main', event: 'push' } as const;
    assert.deepEqual(compilePipeline(main, push), { toRead: ['ci/tests.yml'] });
    const files = new Map([
      ['ci/tests.yml', { text: example('`include`: tasks from more files', 1) }],
    ]);
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
    const [task] = compile(example('`services`')).tasks;
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

describe('docs/pipeline.md: when and inputs', () => {
  const whenExample = `version: 1\n${example('`when`')}`;

  test('the when example: on a push, nightly-tests is left out and the others keep their status', () => {
    const tasks = compile(whenExample).tasks;
    assert.deepEqual(
      tasks.map((task) => [task.name, task.when ?? 'on_success']),
      [
        ['build', 'on_success'],
        ['cleanup', 'always'],
        ['notify', 'on_failure'],
        ['smoke', 'always'],
      ],
    );
  });

  test('the when example: the nightly schedule runs nightly-tests and not smoke', () => {
    const names = compile(whenExample, {
      ref: 'refs/heads/main',
      event: 'schedule',
      schedule: 'nightly',
    }).tasks.map((task) => task.name);
    assert.ok(names.includes('nightly-tests'), names.join(', '));
    assert.ok(!names.includes('smoke'), names.join(', '));
  });

  test('the inputs example declares the four fields the reference describes, replicas required', () => {
    const text = `version: 1\n${example('`inputs`')}tasks:\n  deploy:\n    script: [./deploy]\n`;
    const pipeline = compile(text, {
      ref: 'refs/heads/main',
      event: 'manual',
      inputs: { replicas: 3 },
    });
    assert.deepEqual(
      pipeline.inputs?.map((input) => input.name),
      ['env', 'dry_run', 'replicas', 'note'],
    );
    assert.throws(
      () => compile(text, { ref: 'refs/heads/main', event: 'manual', inputs: {} }),
      /replicas/,
    );
  });
});
