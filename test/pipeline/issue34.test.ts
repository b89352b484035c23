// Matrix include/exclude and fail_fast, hidden tasks and extends, and include: (issue #34).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { compilePipeline, type IncludedFile } from '../../lib/pipeline/index.ts';
import { compile, issuesOf, onlyIssue, PUSH_MAIN, show, yaml } from './helpers.ts';

const names = (text: string, files?: Map<string, IncludedFile>) =>
  compile(text, PUSH_MAIN, files).tasks.map((task) => task.name);

const files = (entries: Record<string, string>) =>
  new Map<string, IncludedFile>(Object.entries(entries).map(([path, text]) => [path, { text }]));

describe('matrix include and exclude', () => {
  test('exclude first, then include: a new combination, keys in the order written', () => {
    const tasks = compile(yaml`
      version: 1
      tasks:
        test:
          script: [x]
          matrix:
            node: ["20", "22"]
            os: [linux, arm]
            exclude: [{node: "20", os: arm}]
            include: [{node: "23", os: linux, experimental: "true"}]
    `).tasks;
    assert.deepEqual(
      tasks.map((t) => t.name),
      [
        'test (node: 20, os: linux)',
        'test (node: 22, os: linux)',
        'test (node: 22, os: arm)',
        'test (node: 23, os: linux, experimental: true)',
      ],
    );
    assert.deepEqual(tasks[3]?.matrix, { node: '23', os: 'linux', experimental: 'true' });
  });

  test("an include that matches on the matrix's own keys extends those combinations, as GitHub's example", () => {
    assert.deepEqual(
      names(yaml`
        version: 1
        tasks:
          t:
            script: [x]
            matrix:
              fruit: [apple, pear]
              animal: [cat, dog]
              include:
                - color: green
                - color: pink
                  animal: cat
                - fruit: apple
                  shape: circle
                - fruit: banana
                - fruit: banana
                  animal: cat
      `),
      [
        't (fruit: apple, animal: cat, color: pink, shape: circle)',
        't (fruit: apple, animal: dog, color: green, shape: circle)',
        't (fruit: pear, animal: cat, color: pink)',
        't (fruit: pear, animal: dog, color: green)',
        't (fruit: banana)',
        't (fruit: banana, animal: cat)',
      ],
    );
  });

  test('a matrix of include entries alone runs each entry', () => {
    assert.deepEqual(
      names(
        'version: 1\ntasks:\n  t: { script: [x], matrix: { include: [{a: 1}, {a: 2, b: 3}] } }\n',
      ),
      ['t (a: 1)', 't (a: 2, b: 3)'],
    );
  });

  test('an exclude naming a key or a value the matrix lacks is an error at it', () => {
    const issues = issuesOf(yaml`
      version: 1
      tasks:
        t:
          script: [x]
          matrix:
            os: [linux, arm]
            exclude: [{oss: linux}, {os: armm}]
    `);
    assert.deepEqual(issues.map(show), [
      '7:18 tasks.t.matrix.exclude[0].oss: "oss" is not a key of this matrix (did you mean "os"?)',
      '7:36 tasks.t.matrix.exclude[1].os: "armm" is not a value of "os" (did you mean "arm"?)',
    ]);
  });

  test('an include or exclude entry must name a key, with a valid name', () => {
    assert.equal(
      show(
        onlyIssue('version: 1\ntasks:\n  t: { script: [x], matrix: { a: [1], exclude: [{}] } }\n'),
      ),
      '3:49 tasks.t.matrix.exclude[0]: must name at least one key',
    );
    assert.match(
      show(
        onlyIssue(
          'version: 1\ntasks:\n  t: { script: [x], matrix: { a: [1], include: [{1x: 2}] } }\n',
        ),
      ),
      /tasks\.t\.matrix\.include\[0\]\.1x: "1x" is not a valid matrix key/,
    );
  });

  test('an exclude that leaves nothing, or an include added twice, is an error', () => {
    assert.equal(
      show(
        onlyIssue(
          'version: 1\ntasks:\n  t: { script: [x], matrix: { a: [1], exclude: [{a: 1}] } }\n',
        ),
      ),
      '3:29 tasks.t.matrix: exclude leaves no combination to run',
    );
    assert.equal(
      show(
        onlyIssue(
          'version: 1\ntasks:\n  t: { script: [x], matrix: { a: [1], include: [{a: 2}, {a: 2}] } }\n',
        ),
      ),
      '3:57 tasks.t.matrix.include[1]: adds the combination (a: 2) a second time',
    );
  });

  test('at most 256 expansions per task: the axes, and include past them', () => {
    const values = (n: number) => `[${Array.from({ length: n }, (_, i) => i).join(', ')}]`;
    assert.equal(
      show(
        onlyIssue(
          `version: 1\ntasks:\n  t: { script: [x], matrix: { a: ${values(16)}, b: ${values(17)} } }\n`,
        ),
      ),
      '3:29 tasks.t.matrix: its values make 272 combinations; at most 256 per task are allowed',
    );
    assert.equal(
      names(
        `version: 1\ntasks:\n  t: { script: [x], matrix: { a: ${values(16)}, b: ${values(16)} } }\n`,
      ).length,
      256,
    );
    const issue = onlyIssue(
      `version: 1\ntasks:\n  t: { script: [x], matrix: { a: ${values(16)}, b: ${values(16)}, include: [{a: x}] } }\n`,
    );
    assert.equal(
      issue.message,
      'takes the matrix past 256 combinations; at most 256 per task are allowed',
    );
    assert.equal(issue.path, 'tasks.t.matrix.include[0]');
  });

  test('keys an include adds are checked as environment names against the axes', () => {
    assert.match(
      onlyIssue(
        'version: 1\ntasks:\n  t: { script: [x], matrix: { node-v: [1], include: [{node_v: 2}] } }\n',
      ).message,
      /matrix keys "node-v" and "node_v" would both be passed on as CONDUCTOR_MATRIX_NODE_V/,
    );
  });

  test('fail_fast is compiled onto each expansion, false by default', () => {
    const tasks = compile(yaml`
      version: 1
      tasks:
        a: { script: [x], matrix: { v: [1, 2] }, fail_fast: true }
        b: { script: [x] }
    `).tasks;
    assert.deepEqual(
      tasks.map((t) => [t.name, t.failFast]),
      [
        ['a (v: 1)', true],
        ['a (v: 2)', true],
        ['b', false],
      ],
    );
    assert.equal(
      show(onlyIssue('version: 1\ntasks:\n  a: { script: [x], fail_fast: yes }\n')),
      '3:32 tasks.a.fail_fast: expected true or false, got "yes"',
    );
  });
});

describe('hidden tasks and extends', () => {
  test('a task extends hidden tasks in order, maps deep-merged, lists replaced; hidden tasks never run', () => {
    const [test] = compile(yaml`
      version: 1
      tasks:
        .node:
          image: node:20
          env: { CI: "1", LEVEL: node }
          labels: [linux]
          script: [npm ci]
        .big:
          extends: .node
          labels: [linux, big]
          env: { LEVEL: big }
        test:
          extends: [.node, .big]
          env: { OWN: "1" }
          script: [npm test]
    `).tasks;
    assert.equal(test?.name, 'test');
    assert.equal(test?.image, 'node:20');
    assert.deepEqual(test?.env, { CI: '1', LEVEL: 'big', OWN: '1' });
    assert.deepEqual(test?.labels, ['big', 'linux']);
    assert.deepEqual(test?.script, ['npm test']);
  });

  test('YAML anchors and merge keys work beside extends, a hidden task holding the anchor', () => {
    const [a] = compile(yaml`
      version: 1
      tasks:
        .defaults: &defaults
          image: node:22
          retries: 0
        a:
          <<: *defaults
          script: [make]
    `).tasks;
    assert.deepEqual([a?.image, a?.maxAttempts], ['node:22', 1]);
  });

  test('a missing or visible parent, and a cycle, are errors at the name in extends', () => {
    const issues = issuesOf(yaml`
      version: 1
      tasks:
        .a: { extends: .b }
        .b: { extends: [.a] }
        build: { script: [x] }
        t: { extends: [.nope, build, .a], script: [x] }
    `);
    assert.deepEqual(issues.map(show), [
      // Once, at the name that closes the circle.
      '4:19 tasks[".b"].extends[0]: extends cycle: .a → .b → .a',
      '6:18 tasks.t.extends[0]: unknown hidden task ".nope"',
      '6:25 tasks.t.extends[1]: "build" is a task that runs; extends takes hidden tasks only (names starting with ".")',
    ]);
  });

  test('a hidden task need not be complete, but the task extending it must be', () => {
    assert.deepEqual(
      names('version: 1\ntasks:\n  .x: { image: a }\n  t: { extends: .x, script: [y] }\n'),
      ['t'],
    );
    assert.equal(
      show(onlyIssue('version: 1\ntasks:\n  .x: { image: a }\n  t: { extends: .x }\n')),
      '4:6 tasks.t: missing required key "script"',
    );
  });

  test('a bad value in a hidden task is reported once, at the hidden task, not at each task extending it', () => {
    const issues = issuesOf(yaml`
      version: 1
      tasks:
        .x:
          timeout: 0
          scirpt: [y]
        a: { extends: .x, script: [y] }
        b: { extends: .x, script: [y] }
    `);
    assert.deepEqual(issues.map(show), [
      '4:14 tasks[".x"].timeout: must be positive, got 0',
      '5:5 tasks[".x"]: unknown key "scirpt" (did you mean "script"?)',
    ]);
  });

  test('an invalid hidden task name is an error at its key', () => {
    assert.match(
      show(onlyIssue('version: 1\ntasks:\n  ".-x": { image: a }\n  t: { script: [y] }\n')),
      /^3:3 tasks\["\.-x"\]: invalid hidden task name/,
    );
  });
});

describe('include', () => {
  const main = yaml`
    version: 1
    include: [ci/test.yml]
    tasks:
      build: { script: [make] }
  `;

  test('a compile names the files it needs, then compiles with them; tasks of included files follow', () => {
    assert.deepEqual(compilePipeline(main, PUSH_MAIN), { toRead: ['ci/test.yml'] });
    const second = compilePipeline(
      main,
      PUSH_MAIN,
      files({
        'ci/test.yml':
          'include: [ci/common.yml]\ntasks:\n  test: { extends: .node, needs: [build], script: [t] }\n',
      }),
    );
    assert.deepEqual(second, { toRead: ['ci/common.yml'] });
    const all = files({
      'ci/test.yml':
        'include: [ci/common.yml]\ntasks:\n  test: { extends: .node, needs: [build], script: [t] }\n',
      'ci/common.yml': 'tasks:\n  .node: { image: node:20 }\n  lint: { script: [l] }\n',
    });
    const tasks = compile(main, PUSH_MAIN, all).tasks;
    assert.deepEqual(
      tasks.map((t) => [t.name, t.image, t.needs]),
      [
        ['build', null, []],
        ['test', 'node:20', ['build']],
        ['lint', null, []],
      ],
    );
    // The same files give the same pipeline: a compile invoked twice starts the same job.
    assert.deepEqual(compile(main, PUSH_MAIN, all), compile(main, PUSH_MAIN, all));
  });

  test('an error in an included file names that file, its line and column', () => {
    const issues = issuesOf(
      main,
      PUSH_MAIN,
      files({ 'ci/test.yml': 'tasks:\n  test:\n    script: [t]\n    timeout: 0\n' }),
    );
    assert.deepEqual(issues.map(show), [
      'ci/test.yml:4:14 tasks.test.timeout: must be positive, got 0',
    ]);
    assert.deepEqual(
      issues.map((issue) => issue.file),
      issues.map(() => 'ci/test.yml'),
    );
  });

  test('a YAML error in an included file is reported there, and stops the compile', () => {
    assert.equal(
      show(onlyIssue(main, PUSH_MAIN, files({ 'ci/test.yml': 'tasks:\n  t: [x\n' }))).startsWith(
        'ci/test.yml:',
      ),
      true,
    );
  });

  test('a task defined twice is an error naming both files', () => {
    assert.equal(
      show(
        onlyIssue(main, PUSH_MAIN, files({ 'ci/test.yml': 'tasks:\n  build: { script: [y] }\n' })),
      ),
      'ci/test.yml:2:3 tasks.build: task "build" is defined twice: here and at .conductor.yml:4:3',
    );
  });

  test('an included file holds tasks and include only', () => {
    assert.equal(
      show(
        onlyIssue(main, PUSH_MAIN, files({ 'ci/test.yml': 'defaults: { image: x }\ntasks: {}\n' })),
      ),
      'ci/test.yml:1:1 : unknown key "defaults"',
    );
  });

  test('paths outside the commit are refused at the item: URLs, absolute paths, .. out of the root', () => {
    const issues = issuesOf(yaml`
      version: 1
      include:
        - https://example.com/ci.yml
        - /etc/ci.yml
        - ci/../../x.yml
        - ci/notes.txt
        - 42
      tasks:
        build: { script: [make] }
    `);
    assert.deepEqual(issues.map(show), [
      '3:5 include[0]: "https://example.com/ci.yml" is a URL; include reads files of the same commit only',
      '4:5 include[1]: "/etc/ci.yml" starts with /; write the path from the repository root',
      '5:5 include[2]: "ci/../../x.yml" leaves the repository',
      '6:5 include[3]: "ci/notes.txt" is not a .yml or .yaml file',
      '7:5 include[4]: expected a path, got 42',
    ]);
  });

  test('paths are from the repository root; a file named twice is read once; a cycle is an error', () => {
    assert.deepEqual(
      compilePipeline(
        'version: 1\ninclude: [./ci/a.yml, ci/x/../a.yml, ci/b.yml]\ntasks: {}\n',
        PUSH_MAIN,
      ),
      { toRead: ['ci/a.yml', 'ci/b.yml'] },
    );
    const issue = onlyIssue(
      'version: 1\ninclude: [ci/a.yml]\ntasks: { t: { script: [x] } }\n',
      PUSH_MAIN,
      files({ 'ci/a.yml': 'include: [.conductor.yml]\ntasks: {}\n' }),
    );
    assert.equal(
      show(issue),
      'ci/a.yml:1:11 include[0]: include cycle: .conductor.yml → ci/a.yml → .conductor.yml',
    );
  });

  test('a missing file is an error at the include that names it', () => {
    assert.equal(
      show(
        onlyIssue(main, PUSH_MAIN, new Map([['ci/test.yml', { error: 'no ci/test.yml at abc' }]])),
      ),
      '2:11 include[0]: no ci/test.yml at abc',
    );
  });

  test('includes nest at most 3 deep', () => {
    const chain = files({
      'a.yml': 'include: [b.yml]\ntasks: {}\n',
      'b.yml': 'include: [c.yml]\ntasks: {}\n',
      'c.yml': 'include: [d.yml]\ntasks: { t: { script: [x] } }\n',
    });
    assert.equal(
      show(onlyIssue('version: 1\ninclude: [a.yml]\n', PUSH_MAIN, chain)),
      'c.yml:1:11 include[0]: includes nest more than 3 deep: .conductor.yml → a.yml → b.yml → c.yml → d.yml',
    );
  });

  test('at most 20 files are included', () => {
    const paths = Array.from({ length: 21 }, (_, i) => `f${i}.yml`);
    const given = files(
      Object.fromEntries(paths.map((p, i) => [p, `tasks: { t${i}: { script: [x] } }\n`])),
    );
    const issue = onlyIssue(`version: 1\ninclude: [${paths.join(', ')}]\n`, PUSH_MAIN, given);
    assert.equal(issue.path, 'include[20]');
    assert.equal(
      issue.message,
      '"f20.yml" would be included file number 21; at most 20 files may be included',
    );
  });

  test('an included file over 1 MiB is refused at its line 1, unparsed', () => {
    const big = `tasks: { t: { script: ["${'x'.repeat(1024 * 1024)}"] } }\n`;
    assert.equal(
      show(onlyIssue(main, PUSH_MAIN, files({ 'ci/test.yml': big }))),
      `ci/test.yml:1:1 : the file is ${Buffer.byteLength(big)} bytes; at most 1048576 bytes (1 MiB) are allowed`,
    );
  });
});

// Found in review: bounds that keep a fork's file from costing the compile
// seconds and gigabytes, or a terminal its honesty.
describe('matrix bounds (review)', () => {
  test('include lists at most 256 entries, and a matrix at most 32 keys, checked before any combination is built', () => {
    const vals = Array.from({ length: 256 }, (_, i) => `v${i}`).join(', ');
    const many = Array.from({ length: 5000 }, (_, i) => `      - {k${i}: x}`).join('\n');
    const entries = onlyIssue(
      `version: 1\ntasks:\n  t:\n    script: [echo]\n    matrix:\n      a: [${vals}]\n      include:\n${many}\n`,
    );
    assert.equal(entries.path, 'tasks.t.matrix.include');
    assert.match(entries.message, /lists 5000 entries; at most 256 are allowed/);

    const keys = Array.from({ length: 40 }, (_, i) => `      - {k${i}: x}`).join('\n');
    const tooWide = onlyIssue(
      `version: 1\ntasks:\n  t:\n    script: [echo]\n    matrix:\n      a: [x]\n      include:\n${keys}\n`,
    );
    assert.equal(tooWide.path, 'tasks.t.matrix.include[31].k31');
    assert.equal(tooWide.line, 39);
    assert.match(tooWide.message, /at most 32 matrix keys are allowed/);
  });

  test('a matrix value with a control character or a line break is an error at the value', () => {
    // YAML's own escapes: ESC and CR in one value, a line feed in another.
    const text = [
      'version: 1',
      'tasks:',
      '  t:',
      '    script: [echo]',
      '    matrix:',
      '      v: ["\\e[2K\\rsuccess  build", ok]',
      '      include: [{v: ok, w: "x\\ny"}]',
      '',
    ].join('\n');
    assert.deepEqual(issuesOf(text).map(show), [
      '6:11 tasks.t.matrix.v[0]: must be one line without control characters',
      '7:28 tasks.t.matrix.include[0].w: must be one line without control characters',
    ]);
  });
});
