import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  compilePipeline,
  formatIssue,
  MAX_PIPELINE_BYTES,
  PipelineError,
} from '../../lib/pipeline/index.ts';
import { compile, issuesOf, onlyIssue, PUSH_MAIN, show, yaml } from './helpers.ts';

/** A one-task pipeline whose task body is `body`, on line 3 at column 6 onwards. */
const task = (body: string) => `version: 1\ntasks:\n  t: ${body}\n`;

describe('YAML and document errors', () => {
  test('a YAML syntax error is reported at the line and column yaml gives', () => {
    const issue = onlyIssue('version: 1\ntasks:\n  build:\n\tscript: [make]\n');
    assert.equal(issue.line, 4);
    assert.equal(issue.column, 1);
    assert.equal(issue.path, '');
    assert.match(issue.message, /^invalid YAML: .*tab/i);
  });

  test('a duplicate key is reported at the second occurrence with its path', () => {
    const issue = onlyIssue(yaml`
      version: 1
      tasks:
        build: { script: [a] }
        build: { script: [b] }
    `);
    assert.equal(show(issue), '4:3 tasks.build: duplicate key "build"');
  });

  test('a document that is not a map is rejected at its start', () => {
    assert.equal(show(onlyIssue('- a\n- b\n')), '1:1 : expected a map, got a list');
    assert.equal(show(onlyIssue('\n\nhello\n')), '3:1 : expected a map, got "hello"');
  });

  test('an empty file, or one holding only comments, is rejected', () => {
    for (const text of ['', '\n\n', '# nothing here\n']) {
      assert.equal(
        show(onlyIssue(text)),
        '1:1 : the file is empty; it needs at least version and tasks',
      );
    }
  });

  test('a file over 1 MiB of UTF-8 is rejected at line 1 before it is parsed', () => {
    // 524,289 characters but 1,048,578 bytes: the limit counts bytes, not characters.
    const text = `# ${'é'.repeat(524_288)}\n[`;
    const issue = onlyIssue(text);
    assert.deepEqual(issue, {
      line: 1,
      column: 1,
      path: '',
      message: `the file is ${Buffer.byteLength(text)} bytes; at most 1048576 bytes (1 MiB) are allowed`,
    });
  });

  test('a file of exactly 1 MiB is parsed', () => {
    const text = `#${'x'.repeat(MAX_PIPELINE_BYTES - 1)}`;
    assert.match(onlyIssue(text).message, /the file is empty/);
  });

  test('a second YAML document is rejected where it starts', () => {
    const issue = onlyIssue('version: 1\ntasks: { a: { script: [x] } }\n---\nversion: 1\n');
    assert.equal(show(issue), '3:1 : invalid YAML: the file must hold a single YAML document');
  });

  test('an alias without an anchor is reported at the alias', () => {
    const issue = onlyIssue(task('{ script: [x], image: *img }'));
    assert.equal(show(issue), '3:28 tasks.t.image: alias *img has no anchor &img before it');
  });

  test('an alias to a value that contains it is reported instead of recursing', () => {
    const issues = issuesOf(task('&self { script: [x], env: { A: *self } }'));
    assert.ok(
      issues.some((issue) => issue.message === 'alias *self refers to a value that contains it'),
      issues.map(show).join('\n'),
    );
  });

  test('aliases that expand exponentially are cut off', () => {
    let text = 'version: 1\ntasks:\n  t:\n    script: [x]\n    env:\n';
    text += '      A0: &a0 [x, x, x, x, x, x, x, x, x, x]\n';
    for (let i = 1; i < 9; i++) {
      text += `      A${i}: &a${i} [${Array(10)
        .fill(`*a${i - 1}`)
        .join(', ')}]\n`;
    }
    const issues = issuesOf(text);
    assert.ok(issues.some((issue) => issue.message === 'aliases expand to more than 10000 values'));
  });

  test('nesting deeper than 32 levels is rejected before yaml composes it', () => {
    assert.equal(show(onlyIssue('['.repeat(100_000))), '1:36 : nested more than 32 levels deep');
    const block = Array.from({ length: 200 }, (_, i) => `${' '.repeat(i)}a:`).join('\n');
    assert.match(onlyIssue(block).message, /nested more than 32 levels deep/);
  });

  test('a merge key on something else than a map is reported at its value', () => {
    const issue = onlyIssue(task('{ <<: [1], script: [x] }'));
    assert.equal(show(issue), '3:13 tasks.t: a merge key (<<) takes a map or a list of maps');
  });

  test('a key that is a list or a map is rejected at the key', () => {
    const issue = onlyIssue(
      'version: 1\ntasks:\n  t: { script: [x] }\n  ? [a, b]\n  : { script: [x] }\n',
    );
    assert.equal(show(issue), '4:5 tasks: a key must be a plain value, not a list or a map');
  });

  test('a __proto__ key is rejected and pollutes nothing', () => {
    const issues = issuesOf(yaml`
      version: 1
      __proto__: { polluted: true }
      tasks:
        t: { script: [x], env: { __proto__: x } }
    `);
    assert.deepEqual(issues.map(show), [
      '2:1 : key "__proto__" is not allowed',
      '4:28 tasks.t.env: key "__proto__" is not allowed',
    ]);
    assert.equal(Object.hasOwn(Object.prototype, 'polluted'), false);
  });

  test('task names that shadow Object.prototype members are ordinary names', () => {
    const tasks = compile(yaml`
      version: 1
      tasks:
        constructor: { script: [x], env: { toString: a, hasOwnProperty: b } }
        toString: { script: [x], needs: [constructor] }
    `).tasks;
    assert.deepEqual(
      tasks.map((t) => [t.name, t.needs]),
      [
        ['constructor', []],
        ['toString', ['constructor']],
      ],
    );
    assert.deepEqual(tasks[0]?.env, { toString: 'a', hasOwnProperty: 'b' });
  });
});

describe('schema errors', () => {
  test('version is required and must be 1', () => {
    assert.equal(
      show(onlyIssue('tasks: { t: { script: [x] } }\n')),
      '1:1 : missing required key "version"',
    );
    assert.equal(
      show(onlyIssue('version: 2\ntasks: { t: { script: [x] } }\n')),
      '1:10 version: must be 1, got 2',
    );
    assert.equal(
      show(onlyIssue('version: "1"\ntasks: { t: { script: [x] } }\n')),
      '1:10 version: must be 1, got "1"',
    );
  });

  test('tasks is required and must not be empty', () => {
    assert.equal(show(onlyIssue('version: 1\n')), '1:1 : missing required key "tasks"');
    assert.equal(
      show(onlyIssue('version: 1\ntasks: {}\n')),
      '2:8 tasks: must define at least one task',
    );
    assert.equal(show(onlyIssue('version: 1\ntasks:\n')), '2:1 tasks: expected a map, got null');
  });

  test('an unknown top-level key is named, with a suggestion when one is close', () => {
    assert.deepEqual(issuesOf('version: 1\ntask:\n  t: { script: [x] }\n').map(show), [
      '1:1 : missing required key "tasks"',
      '2:1 : unknown key "task" (did you mean "tasks"?)',
    ]);
    assert.equal(
      show(onlyIssue('version: 1\nstages: [a]\ntasks: { t: { script: [x] } }\n')),
      '2:1 : unknown key "stages"',
    );
  });

  test('an unknown task key is reported at the key, a missing script at the task map', () => {
    const issues = issuesOf(yaml`
      version: 1
      tasks:
        build:
          image: gcc
          scirpt: [make]
    `);
    assert.deepEqual(issues.map(show), [
      '4:5 tasks.build: missing required key "script"',
      '5:5 tasks.build: unknown key "scirpt" (did you mean "script"?)',
    ]);
  });

  test('an unknown defaults key is named', () => {
    const issue = onlyIssue('version: 1\ndefaults: { imag: x }\ntasks: { t: { script: [x] } }\n');
    assert.equal(show(issue), '2:13 defaults: unknown key "imag" (did you mean "image"?)');
  });

  test('an empty script is an error', () => {
    assert.equal(
      show(onlyIssue(task('{ script: [] }'))),
      '3:16 tasks.t.script: script must have at least one line',
    );
  });

  test('a bad list item is reported at the item', () => {
    assert.equal(
      show(onlyIssue(task('{ script: [make, 3] }'))),
      '3:23 tasks.t.script[1]: expected a string, got 3',
    );
    assert.equal(
      show(onlyIssue(task('{ script: make }'))),
      '3:16 tasks.t.script: expected a list, got "make"',
    );
  });

  test('a bad value of each kind is reported at the value', () => {
    const cases: Array<[string, string]> = [
      ['{ script: [x], image: "" }', '3:28 tasks.t.image: must not be empty'],
      ['{ script: [x], image: 5 }', '3:28 tasks.t.image: expected a string, got 5'],
      [
        '{ script: [x], allow_failure: yes }',
        '3:36 tasks.t.allow_failure: expected true or false, got "yes"',
      ],
      ['{ script: [x], needs: build }', '3:28 tasks.t.needs: expected a list, got "build"'],
      ['{ script: [x], labels: [a, ""] }', '3:33 tasks.t.labels[1]: must not be empty'],
      ['{ script: [x], retries: 11 }', '3:30 tasks.t.retries: must be at most 10'],
      ['{ script: [x], retries: -1 }', '3:30 tasks.t.retries: must be at least 0'],
      ['{ script: [x], retries: 1.5 }', '3:30 tasks.t.retries: expected a whole number, got 1.5'],
      ['{ script: [x], retries: two }', '3:30 tasks.t.retries: expected a number, got "two"'],
      [
        '{ script: [x], env: { A: { b: 1 } } }',
        '3:31 tasks.t.env.A: expected a string, number or boolean, got a map',
      ],
      [
        '{ script: [x], env: { A: null } }',
        '3:31 tasks.t.env.A: expected a string, number or boolean, got null',
      ],
      ['{ script: [x], env: [A] }', '3:26 tasks.t.env: expected a map, got a list'],
      ['{ script: [x], only: [] }', '3:27 tasks.t.only: must list at least one ref pattern'],
      ['{ script: [x], only: "" }', '3:27 tasks.t.only: a ref pattern must not be empty'],
      ['{ script: [x], only: [main, 3] }', '3:34 tasks.t.only[1]: expected a string, got 3'],
      [
        '{ script: [x], only: 5 }',
        '3:27 tasks.t.only: expected a ref pattern or a list of them, got 5',
      ],
      [
        '{ script: [x], matrix: { node: [] } }',
        '3:37 tasks.t.matrix.node: must have at least one value',
      ],
      [
        '{ script: [x], matrix: { node: [[1]] } }',
        '3:38 tasks.t.matrix.node[0]: expected a string, number or boolean, got a list',
      ],
      ['{ script: [x], matrix: {} }', '3:29 tasks.t.matrix: must have at least one key'],
    ];
    for (const [body, expected] of cases) {
      assert.equal(show(onlyIssue(task(body))), expected, body);
    }
  });

  test('an invalid timeout is rejected: zero, negative, fractional, garbage, over 7 days', () => {
    const hint = 'expected whole seconds or a duration such as 90s, 10m, 2h';
    const cases: Array<[string, string]> = [
      ['0', 'must be positive, got 0'],
      ['-5', 'must be positive, got -5'],
      ['0m', 'must be positive, got "0m"'],
      ['1.5', `${hint}, got 1.5`],
      ['soon', `${hint}, got "soon"`],
      ['10 m', `${hint}, got "10 m"`],
      ['true', `${hint}, got true`],
      ['8d', 'must be at most 7 days (604800 seconds), got "8d"'],
      ['604801', 'must be at most 7 days (604800 seconds), got 604801'],
      [
        '99999999999999999999h',
        'must be at most 7 days (604800 seconds), got "99999999999999999999h"',
      ],
    ];
    for (const [value, message] of cases) {
      assert.equal(
        show(onlyIssue(task(`{ script: [x], timeout: ${value} }`))),
        `3:30 tasks.t.timeout: ${message}`,
      );
    }
    const issue = onlyIssue(
      'version: 1\ndefaults: { timeout: 0 }\ntasks: { t: { script: [x] } }\n',
    );
    assert.equal(show(issue), '2:22 defaults.timeout: must be positive, got 0');
  });

  test('names of env variables, secrets and outputs must be identifiers', () => {
    const rule = '(letters, digits and _, not starting with a digit)';
    assert.equal(
      show(onlyIssue(task('{ script: [x], env: { 1X: a } }'))),
      `3:28 tasks.t.env.1X: "1X" is not a valid environment variable name ${rule}`,
    );
    assert.equal(
      show(onlyIssue(task('{ script: [x], secrets: [OK, not-ok] }'))),
      `3:35 tasks.t.secrets[1]: "not-ok" is not a valid secret name ${rule}`,
    );
    assert.equal(
      show(onlyIssue(task('{ script: [x], outputs: [a.b] }'))),
      `3:31 tasks.t.outputs[0]: "a.b" is not a valid output name ${rule}`,
    );
  });

  test('outputs must be distinct, also once mangled into environment names', () => {
    assert.equal(
      show(onlyIssue(task('{ script: [x], outputs: [a, a] }'))),
      '3:34 tasks.t.outputs[1]: duplicate output "a"',
    );
    assert.equal(
      show(onlyIssue(task('{ script: [x], outputs: [foo, FOO] }'))),
      '3:36 tasks.t.outputs[1]: outputs "foo" and "FOO" would both be passed on as CONDUCTOR_NEEDS_<TASK>_FOO',
    );
    assert.equal(
      show(onlyIssue(task('{ script: [x], outputs: [_] }'))),
      '3:31 tasks.t.outputs[0]: output name "_" needs a letter or digit',
    );
  });

  test('a task may promise at most 100 outputs', () => {
    const outputs = Array.from({ length: 101 }, (_, i) => `o${i}`).join(', ');
    const issue = onlyIssue(task(`{ script: [x], outputs: [${outputs}] }`));
    assert.equal(show(issue), '3:30 tasks.t.outputs: must list at most 100 outputs');
  });

  test('matrix keys must be names that stay distinct as environment names', () => {
    assert.equal(
      show(onlyIssue(task('{ script: [x], matrix: { 1x: [a] } }'))),
      '3:31 tasks.t.matrix.1x: "1x" is not a valid matrix key (letters, digits, _ and -, starting with a letter or _)',
    );
    assert.equal(
      show(onlyIssue(task('{ script: [x], matrix: { node-version: [1], node_version: [2] } }'))),
      '3:50 tasks.t.matrix.node_version: matrix keys "node-version" and "node_version" would both be passed on as CONDUCTOR_MATRIX_NODE_VERSION',
    );
  });

  test('the pipeline name must be a short single line', () => {
    assert.equal(
      show(onlyIssue('version: 1\nname: ""\ntasks: { t: { script: [x] } }\n')),
      '2:7 name: must not be empty',
    );
    assert.equal(
      show(onlyIssue(`version: 1\nname: ${'n'.repeat(101)}\ntasks: { t: { script: [x] } }\n`)),
      '2:7 name: must be at most 100 characters',
    );
  });
});

describe('task graph errors', () => {
  test('a task name must be a letter or digit followed by letters, digits, dots, _ or -', () => {
    const rule =
      'use a letter or digit, then letters, digits, ".", "_" or "-", at most 100 characters';
    const issues = issuesOf(yaml`
      version: 1
      tasks:
        "my task": { script: [x] }
        -lint: { script: [x] }
        ${'x'.repeat(101)}: { script: [x] }
        v1.2_ok-name: { script: [x] }
    `);
    assert.deepEqual(issues.map(show), [
      `3:3 tasks["my task"]: invalid task name "my task": ${rule}`,
      `4:3 tasks.-lint: invalid task name "-lint": ${rule}`,
      `5:3 tasks.${'x'.repeat(101)}: invalid task name "${'x'.repeat(60)}…": ${rule}`,
    ]);
  });

  test('a need that names no task is reported at the item, naming it', () => {
    const issue = onlyIssue(yaml`
      version: 1
      tasks:
        build: { script: [a] }
        test: { script: [a], needs: [build, biuld] }
    `);
    assert.equal(
      show(issue),
      '4:39 tasks.test.needs[1]: unknown task "biuld" (did you mean "build"?)',
    );
  });

  test('a task that needs itself is an error', () => {
    assert.equal(
      show(onlyIssue(task('{ script: [x], needs: [t] }'))),
      '3:29 tasks.t.needs[0]: a task cannot need itself',
    );
  });

  test('a cycle is reported once, naming it, at the need that starts it', () => {
    const issue = onlyIssue(yaml`
      version: 1
      tasks:
        a: { script: [x], needs: [b] }
        b: { script: [x], needs: [c] }
        c: { script: [x], needs: [a] }
    `);
    assert.equal(show(issue), '3:29 tasks.a.needs[0]: cycle: a → b → c → a');
  });

  test('separate cycles are reported separately', () => {
    const issues = issuesOf(yaml`
      version: 1
      tasks:
        a: { script: [x], needs: [b] }
        b: { script: [x], needs: [a] }
        ok: { script: [x], needs: [a] }
        c: { script: [x], needs: [ok, d] }
        d: { script: [x], needs: [c] }
    `);
    assert.deepEqual(
      issues.map((issue) => issue.message),
      ['cycle: a → b → a', 'cycle: c → d → c'],
    );
    assert.equal(issues[1]?.path, 'tasks.c.needs[1]');
  });

  test('repeated matrix values, which would run the same task twice, are an error', () => {
    const issue = onlyIssue(yaml`
      version: 1
      tasks:
        test:
          script: [x]
          matrix:
            node: [20, "20"]
    `);
    assert.equal(
      show(issue),
      '6:18 tasks.test.matrix.node[1]: duplicate matrix value "20": the same task would run twice',
    );
  });

  test('task names that mangle to the same environment name are an error naming both', () => {
    const issue = onlyIssue(yaml`
      version: 1
      tasks:
        build-app: { script: [x] }
        build_app: { script: [x] }
    `);
    assert.equal(
      show(issue),
      '4:3 tasks.build_app: task names "build-app" and "build_app" would both be passed on as BUILD_APP in environment variable names',
    );
    const expanded = onlyIssue(yaml`
      version: 1
      tasks:
        t: { script: [x], matrix: { v: [a] } }
        t_v_a: { script: [x] }
    `);
    assert.match(expanded.message, /"t \(v: a\)" and "t_v_a" would both be passed on as T_V_A/);
  });

  test('two needed outputs that would land in the same variable are an error', () => {
    const issue = onlyIssue(yaml`
      version: 1
      tasks:
        a: { script: [x], outputs: [b_c] }
        a_b: { script: [x], outputs: [c] }
        d: { script: [x], needs: [a, a_b] }
    `);
    assert.equal(
      show(issue),
      '5:28 tasks.d.needs: output "b_c" of "a" and output "c" of "a_b" would both be passed on as CONDUCTOR_NEEDS_A_B_C',
    );
  });

  test('more than 500 tasks after matrix expansion is an error, on every branch', () => {
    const text = yaml`
      version: 1
      tasks:
        lint: { script: [x], only: nowhere }
        test:
          script: [x]
          matrix: &m { a: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16], b: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16] }
        test2: { script: [x], matrix: *m }
    `;
    const message = 'the pipeline expands to 513 tasks; at most 500 tasks per job are allowed';
    assert.equal(show(onlyIssue(text)), `3:3 tasks: ${message}`);
    assert.equal(
      show(onlyIssue(text, { ref: 'refs/heads/x', event: 'push' })),
      `3:3 tasks: ${message}`,
    );
  });

  test('exactly 500 tasks after expansion compile', () => {
    const values = (n: number) => `[${Array.from({ length: n }, (_, i) => i).join(', ')}]`;
    const matrix = `{ a: ${values(10)}, b: ${values(25)} }`;
    const pipeline = compile(
      `version: 1\ntasks:\n  t: { script: [x], matrix: ${matrix} }\n  u: { script: [x], matrix: ${matrix} }\n`,
    );
    assert.equal(pipeline.tasks.length, 500);
    assert.equal(pipeline.tasks.at(-1)?.name, 'u (a: 9, b: 24)');
  });
});

describe('reporting', () => {
  test('every problem in a file is reported, in file order', () => {
    const issues = issuesOf(yaml`
      version: 1
      extra: true
      tasks:
        build:
          script: []
          timeout: forever
        test:
          script: [x]
          needs: [bild, test]
    `);
    assert.deepEqual(issues.map(show), [
      '2:1 : unknown key "extra"',
      '5:13 tasks.build.script: script must have at least one line',
      '6:14 tasks.build.timeout: expected whole seconds or a duration such as 90s, 10m, 2h, got "forever"',
      '9:13 tasks.test.needs[0]: unknown task "bild" (did you mean "build"?)',
      '9:19 tasks.test.needs[1]: a task cannot need itself',
    ]);
  });

  test('when tasks is not a map the graph checks are skipped but the rest is reported', () => {
    const issues = issuesOf('version: 3\nextra: 1\ntasks: [build, test]\n');
    assert.deepEqual(issues.map(show), [
      '1:10 version: must be 1, got 3',
      '2:1 : unknown key "extra"',
      '3:8 tasks: expected a map, got a list',
    ]);
  });

  test('a task with a schema problem still takes part in the graph checks', () => {
    const issues = issuesOf(yaml`
      version: 1
      tasks:
        a: { script: 5, needs: [b] }
        b: { script: [x], needs: [a] }
        c: [not, a, map]
        d: { script: [x], needs: [c, e] }
    `);
    assert.deepEqual(
      issues.map((issue) => issue.message),
      [
        'expected a list, got 5',
        'cycle: a → b → a',
        'expected a map, got a list',
        'unknown task "e"',
      ],
    );
  });

  test('keys that are not plain words are quoted in paths', () => {
    const issue = onlyIssue('version: 1\ntasks:\n  v1.2: { script: [] }\n');
    assert.equal(issue.path, 'tasks["v1.2"].script');
  });

  test('formatIssue renders file:line:column: path: message, leaving out an empty path', () => {
    assert.equal(
      formatIssue({ line: 3, column: 5, path: 'tasks.build', message: 'oops' }),
      '.conductor.yml:3:5: tasks.build: oops',
    );
    assert.equal(
      formatIssue({ line: 1, column: 1, path: '', message: 'oops' }),
      '.conductor.yml:1:1: oops',
    );
    assert.equal(
      formatIssue({ line: 2, column: 4, path: 'version', message: 'x' }, 'ci/other.yml'),
      'ci/other.yml:2:4: version: x',
    );
  });

  test('a PipelineError carries the issues and lists them one per line in its message', () => {
    try {
      compilePipeline('version: 2\nextra: 1\ntasks: { t: { script: [x] } }\n', PUSH_MAIN);
      assert.fail('expected a PipelineError');
    } catch (error) {
      assert.ok(error instanceof PipelineError);
      assert.ok(error instanceof Error);
      assert.equal(error.name, 'PipelineError');
      assert.equal(error.issues.length, 2);
      assert.equal(
        error.message,
        '.conductor.yml:1:10: version: must be 1, got 2\n.conductor.yml:2:1: unknown key "extra"',
      );
    }
  });

  test('input that is not text is rejected with a PipelineError', () => {
    assert.throws(
      () => compilePipeline(42 as unknown as string, PUSH_MAIN),
      (error) => error instanceof PipelineError && /must be text/.test(error.message),
    );
  });
});
