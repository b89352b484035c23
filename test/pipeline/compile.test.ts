import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { Trigger } from '../../lib/pipeline/index.ts';
import { compile, issuesOf, yaml } from './helpers.ts';

const PUSH_FEATURE: Trigger = { ref: 'refs/heads/feature', event: 'push' };

const names = (text: string, trigger?: Trigger) =>
  compile(text, trigger).tasks.map((task) => task.name);

describe('compilePipeline', () => {
  test('a minimal pipeline compiles to one task with the documented defaults', () => {
    const pipeline = compile(yaml`
      version: 1
      tasks:
        build:
          script: [make]
    `);
    assert.deepEqual(pipeline, {
      name: null,
      tasks: [
        {
          name: 'build',
          baseName: 'build',
          matrix: {},
          image: null,
          script: ['make'],
          env: {},
          labels: [],
          needs: [],
          secrets: [],
          outputs: [],
          allowFailure: false,
          failFast: false,
          services: [],
          block: null,
          changes: null,
          concurrency: null,
          maxAttempts: 3,
          timeoutS: 3600,
          queueTimeoutS: 86_400,
          position: 0,
        },
      ],
    });
  });

  test('the pipeline name is returned for the commit status context', () => {
    const pipeline = compile(yaml`
      version: 1
      name: backend
      tasks:
        build: { script: [make] }
    `);
    assert.equal(pipeline.name, 'backend');
  });

  test('defaults apply to every task and a task setting wins over its default', () => {
    const [build, test] = compile(yaml`
      version: 1
      defaults:
        image: node:20
        timeout: 30m
        retries: 1
        env: { CI: true, LEVEL: default, ONLY_DEFAULT: x }
        labels: [linux]
      tasks:
        build:
          script: [make]
        test:
          script: [make test]
          image: node:22
          timeout: 90
          retries: 0
          env: { LEVEL: task, EXTRA: 1 }
          labels: [gpu, big]
    `).tasks;
    assert.equal(build?.image, 'node:20');
    assert.equal(build?.timeoutS, 1800);
    assert.equal(build?.maxAttempts, 2);
    assert.deepEqual(build?.env, { CI: 'true', LEVEL: 'default', ONLY_DEFAULT: 'x' });
    assert.deepEqual(build?.labels, ['linux']);
    assert.equal(test?.image, 'node:22');
    assert.equal(test?.timeoutS, 90);
    assert.equal(test?.maxAttempts, 1);
    assert.deepEqual(test?.env, { CI: 'true', LEVEL: 'task', ONLY_DEFAULT: 'x', EXTRA: '1' });
    assert.deepEqual(test?.labels, ['big', 'gpu']);
  });

  test('labels are deduplicated and sorted, and an empty list overrides the defaults', () => {
    const [a, b] = compile(yaml`
      version: 1
      defaults: { labels: [linux] }
      tasks:
        a: { script: [x], labels: [z, a, z, m] }
        b: { script: [x], labels: [] }
    `).tasks;
    assert.deepEqual(a?.labels, ['a', 'm', 'z']);
    assert.deepEqual(b?.labels, []);
  });

  test('env and matrix values are stringified as written', () => {
    const [task] = compile(yaml`
      version: 1
      tasks:
        t:
          script: [x]
          env: { PY: 3.10, FLAG: True, HEX: 0x1F, QUOTED: "007", BIG: 12345678901234567890 }
          matrix: { python: [3.10] }
    `).tasks;
    assert.deepEqual(task?.env, {
      PY: '3.10',
      FLAG: 'True',
      HEX: '0x1F',
      QUOTED: '007',
      BIG: '12345678901234567890',
    });
    assert.deepEqual(task?.matrix, { python: '3.10' });
    assert.equal(task?.name, 't (python: 3.10)');
  });

  test('a timeout is whole seconds or a duration in s, m, h or d', () => {
    const tasks = compile(yaml`
      version: 1
      tasks:
        a: { script: [x], timeout: 45 }
        b: { script: [x], timeout: 90s }
        c: { script: [x], timeout: 10m }
        d: { script: [x], timeout: 2h }
        e: { script: [x], timeout: 7d }
    `).tasks;
    assert.deepEqual(
      tasks.map((task) => task.timeoutS),
      [45, 90, 600, 7200, 604800],
    );
  });

  test('allow_failure and retries become allowFailure and maxAttempts', () => {
    const [a, b] = compile(yaml`
      version: 1
      tasks:
        a: { script: [x], allow_failure: true, retries: 10 }
        b: { script: [x], allow_failure: false, retries: 0 }
    `).tasks;
    assert.equal(a?.allowFailure, true);
    assert.equal(a?.maxAttempts, 11);
    assert.equal(b?.allowFailure, false);
    assert.equal(b?.maxAttempts, 1);
  });

  test('secrets keep their order without repeats and outputs are kept as promised', () => {
    const [task] = compile(yaml`
      version: 1
      tasks:
        t: { script: [x], secrets: [NPM_TOKEN, AWS_KEY, NPM_TOKEN], outputs: [version, sha] }
    `).tasks;
    assert.deepEqual(task?.secrets, ['NPM_TOKEN', 'AWS_KEY']);
    assert.deepEqual(task?.outputs, ['version', 'sha']);
  });

  test('a matrix task expands in cartesian order, first key slowest, keys in file order', () => {
    const tasks = compile(yaml`
      version: 1
      tasks:
        test:
          script: [npm test]
          matrix:
            os: [linux, mac]
            node: [18, 20]
    `).tasks;
    assert.deepEqual(
      tasks.map((task) => [task.name, task.baseName, task.matrix, task.position]),
      [
        ['test (os: linux, node: 18)', 'test', { os: 'linux', node: '18' }, 0],
        ['test (os: linux, node: 20)', 'test', { os: 'linux', node: '20' }, 1],
        ['test (os: mac, node: 18)', 'test', { os: 'mac', node: '18' }, 2],
        ['test (os: mac, node: 20)', 'test', { os: 'mac', node: '20' }, 3],
      ],
    );
  });

  test('needing a matrix task means needing every expansion of it', () => {
    const tasks = compile(yaml`
      version: 1
      tasks:
        test:
          script: [x]
          matrix: { node: [18, 20] }
        build: { script: [x] }
        deploy: { script: [x], needs: [test, build, test] }
    `).tasks;
    assert.deepEqual(tasks.at(-1)?.needs, ['test (node: 18)', 'test (node: 20)', 'build']);
  });

  test('tasks keep file order even when their names look like numbers', () => {
    assert.deepEqual(
      names(yaml`
        version: 1
        tasks:
          lint: { script: [x] }
          10: { script: [x] }
          2: { script: [x] }
          1.10: { script: [x], needs: ["10"] }
      `),
      ['lint', '10', '2', '1.10'],
    );
  });

  test('anchors and merge keys share settings between tasks', () => {
    const [a, b] = compile(yaml`
      version: 1
      tasks:
        a: &common
          script: [make]
          image: gcc:14
          env: { CC: gcc }
        b:
          <<: *common
          env: { CC: clang }
    `).tasks;
    assert.equal(a?.image, 'gcc:14');
    assert.equal(b?.image, 'gcc:14');
    assert.deepEqual(b?.script, ['make']);
    assert.deepEqual(b?.env, { CC: 'clang' });
  });

  test('every expansion gets its own copies of lists and maps', () => {
    const [first, second] = compile(yaml`
      version: 1
      tasks:
        t: { script: [x], matrix: { n: [1, 2] }, env: { A: a } }
    `).tasks;
    assert.ok(first && second);
    assert.notEqual(first.script, second.script);
    assert.notEqual(first.env, second.env);
    assert.notEqual(first.needs, second.needs);
  });
});

describe('only', () => {
  const text = yaml`
    version: 1
    tasks:
      build: { script: [x] }
      publish: { script: [x], needs: [build], only: [main, "release/*"] }
      announce: { script: [x], needs: [publish] }
      docs: { script: [x], needs: [build] }
  `;

  test('a task with no only always runs, whatever the trigger', () => {
    const plain = yaml`
      version: 1
      tasks:
        build: { script: [x] }
    `;
    for (const trigger of [
      PUSH_FEATURE,
      { ref: 'refs/tags/v1', event: 'tag' },
      { ref: 'refs/pull/3/head', event: 'pull_request', baseRef: 'dev' },
      { ref: 'refs/heads/main', event: 'manual' },
    ] as const) {
      assert.deepEqual(names(plain, trigger), ['build']);
    }
  });

  test('a task whose only pattern misses is left out with its dependents, transitively', () => {
    const pipeline = compile(text, { ref: 'refs/heads/feature/x', event: 'push' });
    assert.deepEqual(
      pipeline.tasks.map((task) => [task.name, task.position]),
      [
        ['build', 0],
        ['docs', 1],
      ],
    );
  });

  test('a task whose only pattern matches runs with its dependents', () => {
    assert.deepEqual(names(text, { ref: 'refs/heads/release/1.2', event: 'push' }), [
      'build',
      'publish',
      'announce',
      'docs',
    ]);
  });

  test('only accepts a single pattern as a string', () => {
    const pipeline = yaml`
      version: 1
      tasks:
        release: { script: [x], only: "v*" }
    `;
    assert.deepEqual(names(pipeline, { ref: 'refs/tags/v1.0', event: 'tag' }), ['release']);
    assert.deepEqual(names(pipeline, { ref: 'refs/heads/main', event: 'push' }), []);
  });

  test('a pull request runs the tasks whose only matches the branch it merges into', () => {
    const trigger: Trigger = { ref: 'refs/pull/7/head', event: 'pull_request', baseRef: 'main' };
    assert.deepEqual(names(text, trigger), ['build', 'publish', 'announce', 'docs']);
  });

  test('when every task is left out the job has no tasks', () => {
    const pipeline = compile(
      yaml`
        version: 1
        name: deploys
        tasks:
          deploy: { script: [x], only: production }
      `,
      PUSH_FEATURE,
    );
    assert.deepEqual(pipeline, { name: 'deploys', tasks: [] });
  });

  test('a broken pipeline fails on every branch, even where the broken task is left out', () => {
    const broken = yaml`
      version: 1
      tasks:
        build: { script: [x] }
        deploy: { script: [x], only: main, needs: [nope] }
    `;
    assert.equal(issuesOf(broken, PUSH_FEATURE).length, 1);
    assert.equal(issuesOf(broken).length, 1);
  });
});
