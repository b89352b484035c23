// Service containers in the pipeline file (issue #34): what a task's
// `services:` compiles to, and the errors a bad one gets, by line and field.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { compile, issuesOf, onlyIssue, show, yaml } from './helpers.ts';

test('services compile in file order, env values as written, with the health command and its timeout', () => {
  const [task] = compile(yaml`
    version: 1
    tasks:
      test:
        image: node:22
        services:
          db:
            image: postgres:16
            env: {POSTGRES_PASSWORD: test, PGPORT: 5432, RATIO: 3.10}
            ports: [5432]
            health: "pg_isready -U postgres"
            health_timeout: 2m
          cache:
            image: redis:7
        script: ["npm test"]
  `).tasks;
  assert.deepEqual(task?.services, [
    {
      name: 'db',
      image: 'postgres:16',
      env: { POSTGRES_PASSWORD: 'test', PGPORT: '5432', RATIO: '3.10' },
      ports: [5432],
      health: 'pg_isready -U postgres',
      healthTimeoutS: 120,
    },
    { name: 'cache', image: 'redis:7', env: {}, ports: [], health: null, healthTimeoutS: 60 },
  ]);
});

test('a task without services has none; every expansion of a matrix task has the same', () => {
  const tasks = compile(yaml`
    version: 1
    tasks:
      plain:
        script: [x]
      test:
        matrix: {v: [a, b]}
        services: {db: {image: postgres:16}}
        script: [x]
  `).tasks;
  assert.deepEqual(tasks[0]?.services, []);
  assert.deepEqual(
    tasks.slice(1).map((t) => t.services?.map((s) => s.name)),
    [['db'], ['db']],
  );
});

test('a hidden task shares services, deep-merged with the task that extends it', () => {
  const [task] = compile(yaml`
    version: 1
    tasks:
      .with-db:
        services:
          db: {image: postgres:16, env: {POSTGRES_PASSWORD: test}}
      test:
        extends: .with-db
        services:
          db: {env: {POSTGRES_DB: app}}
        script: [x]
  `).tasks;
  assert.deepEqual(task?.services?.[0]?.env, { POSTGRES_PASSWORD: 'test', POSTGRES_DB: 'app' });
  assert.equal(task?.services?.[0]?.image, 'postgres:16');
});

test('a bad service name, an unknown key, a missing image and a bad port are errors at their lines', () => {
  const issues = issuesOf(yaml`
    version: 1
    tasks:
      test:
        script: [x]
        services:
          My_DB:
            image: postgres:16
          cache:
            imgae: redis:7
          web:
            image: nginx
            ports: [0]
  `).map(show);
  assert.ok(
    issues.some((i) =>
      /^6:7 tasks\.test\.services\.My_DB: "My_DB" is not a valid service name/.test(i),
    ),
    issues.join('\n'),
  );
  assert.ok(
    issues.some((i) => /^9:9 .*unknown key "imgae" \(did you mean "image"\?\)/.test(i)),
    issues.join('\n'),
  );
  assert.ok(
    issues.some((i) => /^9:9 tasks\.test\.services\.cache: missing required key "image"/.test(i)),
    issues.join('\n'),
  );
  assert.ok(
    issues.some((i) => /^12:\d+ tasks\.test\.services\.web\.ports/.test(i)),
    issues.join('\n'),
  );
});

test('more than 10 services is an error naming the limit', () => {
  const many = Array.from({ length: 11 }, (_, i) => `      s${i}: {image: x}`).join('\n');
  const issue = onlyIssue(`version: 1\ntasks:\n  test:\n    script: [x]\n    services:\n${many}\n`);
  assert.match(issue.message, /at most 10 services/);
  assert.equal(issue.line, 6);
});

test("a service's command and entrypoint compile word for word; a string, an empty command or a word that is not a string is an error at its line", () => {
  const [task] = compile(yaml`
    version: 1
    tasks:
      test:
        services:
          cache:
            image: redis:7
            command: [redis-server, --port, "6380"]
          web:
            image: nginx
            entrypoint: []
          db:
            image: postgres:16
            entrypoint: [docker-entrypoint.sh, postgres]
            command: [-c, "fsync=off"]
        script: [x]
  `).tasks;
  assert.deepEqual(
    task?.services?.map((s) => [s.name, s.entrypoint, s.command]),
    [
      ['cache', undefined, ['redis-server', '--port', '6380']],
      ['web', [], undefined],
      ['db', ['docker-entrypoint.sh', 'postgres'], ['-c', 'fsync=off']],
    ],
  );
  const issues = issuesOf(yaml`
    version: 1
    tasks:
      test:
        script: [x]
        services:
          cache:
            image: redis:7
            command: redis-server --port 6380
          web:
            image: nginx
            command: []
          db:
            image: postgres:16
            entrypoint: [run, 5]
  `).map(show);
  for (const re of [
    /^8:\d+ tasks\.test\.services\.cache\.command: expected a list of words, e\.g\. \[redis-server, --port, '6380'\], got "redis-server --port 6380"$/,
    /^11:\d+ tasks\.test\.services\.web\.command: must not be empty/,
    /^14:\d+ tasks\.test\.services\.db\.entrypoint\[1\]: expected a string, got 5$/,
  ]) {
    assert.ok(
      issues.some((i) => re.test(i)),
      `${re}\n${issues.join('\n')}`,
    );
  }
});
