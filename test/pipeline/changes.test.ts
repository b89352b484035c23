// changes: and block: in the pipeline file (issue #30): how they are written,
// what they compile to, how path patterns match (lib/pipeline/pathglob.ts), and the errors.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import { type CompiledChanges, changesMatch, changesSkipReason } from '../../lib/pipeline/index.ts';
import { compile, issuesOf, yaml } from './helpers.ts';

const shown = (text: string) =>
  issuesOf(text).map((i) => `${i.line}:${i.column} ${i.path}: ${i.message}`);

describe('changes:', () => {
  test('a list compiles to includes, with ! entries as excludes', () => {
    const [task] = compile(yaml`
      version: 1
      tasks:
        web:
          script: [make]
          changes: ["src/**", "!src/**/*.md"]
    `).tasks;
    assert.deepEqual(task?.changes, { include: ['src/**'], exclude: ['src/**/*.md'] });
  });

  test('a map of include and exclude compiles as written; exclude alone includes everything', () => {
    const tasks = compile(yaml`
      version: 1
      tasks:
        a: { script: [x], changes: { include: [api/**], exclude: [api/docs/**] } }
        b: { script: [x], changes: { exclude: [docs/**] } }
        c: { script: [x], changes: ["!docs/**"] }
        d: { script: [x] }
    `).tasks;
    assert.deepEqual(
      tasks.map((t) => t.changes),
      [
        { include: ['api/**'], exclude: ['api/docs/**'] },
        { include: ['**'], exclude: ['docs/**'] },
        { include: ['**'], exclude: ['docs/**'] },
        null,
      ],
    );
  });

  test('path patterns: * stays in a directory, ** crosses them, dot files match, excludes win', () => {
    const src: CompiledChanges = { include: ['src/**'], exclude: ['src/**/*.md'] };
    assert.ok(changesMatch(src, ['src/a/b/c.ts']));
    assert.ok(changesMatch(src, ['README.md', 'src/.env.example']));
    assert.ok(!changesMatch(src, ['src/docs/intro.md']));
    assert.ok(!changesMatch(src, ['docs/src/a.ts', 'srcs/a.ts']));
    assert.ok(!changesMatch(src, []));
    const top: CompiledChanges = { include: ['*.json'], exclude: [] };
    assert.ok(changesMatch(top, ['package.json']));
    assert.ok(!changesMatch(top, ['sub/package.json']));
    assert.ok(changesMatch({ include: ['.github/**'], exclude: [] }, ['.github/workflows/x.yml']));
  });

  test('the skip reason names the patterns', () => {
    assert.equal(
      changesSkipReason({ include: ['src/**'], exclude: [] }),
      'no changed file matches src/**',
    );
    assert.equal(
      changesSkipReason({ include: ['a/**', 'b/**', 'c/**', 'd/**'], exclude: ['**/*.md'] }),
      'no changed file matches a/**, b/**, c/** (and 1 more) outside **/*.md',
    );
  });

  test('bad filters are errors at their line', () => {
    const issues = shown(yaml`
      version: 1
      tasks:
        a: { script: [x], changes: [] }
        b: { script: [x], changes: 3 }
        c: { script: [x], changes: ["!"] }
        d: { script: [x], changes: { includes: [src/**] } }
    `);
    assert.deepEqual(issues, [
      '3:30 tasks.a.changes: must list at least one path pattern',
      '4:30 tasks.b.changes: expected a path pattern, a list of them or a map of include and exclude, got 3',
      '5:31 tasks.c.changes[0]: a path pattern must not be "!" alone',
      '6:32 tasks.d.changes: unknown key "includes" (did you mean "include"?)',
    ]);
  });
});

describe('block:', () => {
  test('a block step compiles with its fields as outputs and no script', () => {
    const [, approve] = compile(yaml`
      version: 1
      tasks:
        build: { script: [make] }
        approve:
          needs: [build]
          block:
            prompt: "Deploy to production?"
            fields:
              - {name: reason, type: text, required: true}
              - {name: region, type: select, options: [eu, us]}
            timeout: 72h
            on_timeout: skip
    `).tasks;
    assert.deepEqual(approve?.script, []);
    assert.deepEqual(approve?.outputs, ['reason', 'region']);
    assert.deepEqual(approve?.block, {
      prompt: 'Deploy to production?',
      fields: [
        { name: 'reason', type: 'text', required: true, options: null },
        { name: 'region', type: 'select', required: false, options: ['eu', 'us'] },
      ],
      timeoutS: 72 * 3600,
      onTimeout: 'skip',
    });
  });

  test('a block step defaults to a day and fails when nobody answers', () => {
    const [gate] = compile(yaml`
      version: 1
      tasks:
        gate: { block: { prompt: Go? } }
    `).tasks;
    assert.equal(gate?.block?.timeoutS, 24 * 3600);
    assert.equal(gate?.block?.onTimeout, 'fail');
    assert.deepEqual(gate?.outputs, []);
  });

  test('block errors name the field and line', () => {
    const issues = shown(yaml`
      version: 1
      tasks:
        a: { script: [x], block: { prompt: Go? } }
        b: { block: { prompt: Go?, fields: [{name: r, type: select}] } }
        c: { block: { prompt: Go?, fields: [{name: r, options: [x]}] } }
        d: { block: { prompt: Go?, fields: [{name: r}, {name: r}] } }
        e: { block: { prompt: Go?, on_timeout: wait } }
        f: { block: { prompt: Go?, promt: x } }
        g: { needs: [a] }
    `);
    assert.deepEqual(issues, [
      '3:28 tasks.a.block: a block step runs no script: remove script or block',
      '4:39 tasks.b.block.fields[0]: a select field needs options',
      '5:58 tasks.c.block.fields[0].options: only a select field has options',
      '6:57 tasks.d.block.fields[1].name: duplicate field "r"',
      '7:42 tasks.e.block.on_timeout: must be "fail" or "skip"',
      '8:30 tasks.f.block: unknown key "promt" (did you mean "prompt"?)',
      '9:6 tasks.g: missing required key "script"',
    ]);
  });
});

describe('block: with inputs and a timeout (#48)', () => {
  const MANUAL = { ref: 'refs/heads/main', event: 'manual' } as const;

  test("an input's expression in a block's prompt is the run's value; a matrix's expansions each get it", () => {
    const tasks = compile(
      yaml`
        version: 1
        inputs:
          env: { type: choice, options: [staging, prod], default: staging }
        tasks:
          gate:
            matrix: { region: [eu, us] }
            block: { prompt: "Deploy to \${{ inputs.env }}?" }
      `,
      { ...MANUAL, inputs: { env: 'prod' } },
    ).tasks;
    assert.deepEqual(
      tasks.map((t) => t.block?.prompt),
      ['Deploy to prod?', 'Deploy to prod?'],
    );
    const pushed = compile(yaml`
      version: 1
      inputs:
        env: { type: string, default: staging }
      tasks:
        gate: { block: { prompt: "Deploy to \${{ inputs.env }}?" } }
    `).tasks;
    assert.equal(pushed[0]?.block?.prompt, 'Deploy to staging?');
  });

  test('a value with line breaks stays one line, and a long one is cut at 200 characters', () => {
    const text = yaml`
      version: 1
      inputs:
        note: { type: string }
      tasks:
        gate: { block: { prompt: "Why: \${{ inputs.note }}" } }
    `;
    const [broken] = compile(text, { ...MANUAL, inputs: { note: 'one\ntwo' } }).tasks;
    assert.equal(broken?.block?.prompt, 'Why: one two');
    const [long] = compile(text, { ...MANUAL, inputs: { note: 'x'.repeat(500) } }).tasks;
    assert.equal(long?.block?.prompt.length, 200);
    assert.ok(long?.block?.prompt.endsWith('x…'));
  });

  test('an undeclared input in a prompt is an error at its line', () => {
    assert.deepEqual(
      shown(yaml`
        version: 1
        tasks:
          gate:
            block: { prompt: "Deploy \${{ inputs.env }}?" }
      `),
      [
        // biome-ignore lint/suspicious/noTemplateCurlyInString: the expression as the message quotes it
        '4:22 tasks.gate.block.prompt: ${{ inputs.env }} names an input that is not declared (the pipeline declares no inputs)',
      ],
    );
  });

  test('a task-level timeout on a block step is an error at its line that names block.timeout', () => {
    assert.deepEqual(
      shown(yaml`
        version: 1
        tasks:
          wait:
            timeout: 2h
            block: { prompt: Go? }
      `),
      ['4:14 tasks.wait.timeout: a block step waits for block.timeout: move timeout under block'],
    );
    // block.timeout itself, and defaults.timeout (which a block step ignores), are fine.
    const [wait] = compile(yaml`
      version: 1
      defaults: { timeout: 10m }
      tasks:
        wait: { block: { prompt: Go?, timeout: 2h } }
    `).tasks;
    assert.equal(wait?.block?.timeoutS, 7200);
  });
});

describe('docs/pipeline.md', () => {
  const reference = readFileSync(new URL('../../docs/pipeline.md', import.meta.url), 'utf8');
  const section = (title: string) => {
    const start = reference.indexOf(`## \`${title}\``);
    const body = reference.slice(start, reference.indexOf('\n## ', start + 1));
    return /```yml\n([\s\S]*?)```/.exec(body)?.[1] ?? '';
  };

  test('the changes: example compiles to the filters it describes', () => {
    const tasks = compile(`version: 1\n${section('changes')}`).tasks;
    assert.deepEqual(
      tasks.map((t) => [t.name, t.changes]),
      [
        ['web', { include: ['web/**'], exclude: ['web/**/*.md'] }],
        ['api', { include: ['api/**', 'go.mod'], exclude: [] }],
        ['deploy-web', null],
      ],
    );
  });

  test('the block: example compiles to a block whose fields the deploy task needs', () => {
    const tasks = compile(`version: 1\n${section('block')}`).tasks;
    assert.deepEqual(
      tasks.map((t) => [t.name, t.block?.prompt ?? null, t.outputs]),
      [
        ['build', null, []],
        ['approve-prod', 'Deploy to production?', ['reason', 'region']],
        ['deploy', null, []],
      ],
    );
    assert.equal(tasks[1]?.block?.timeoutS, 72 * 3600);
  });
});

describe('concurrency:', () => {
  test('a group is lower-cased with the ref filled in; limit 1 and queue by default', () => {
    const tasks = compile(
      yaml`
      version: 1
      tasks:
        deploy: { script: [x], concurrency: { group: "Deploy-\${CONDUCTOR_REF}" } }
        shared: { script: [x], concurrency: { group: "org:DB", limit: 2, mode: cancel_running } }
    `,
      { ref: 'refs/heads/Main', event: 'push' },
    ).tasks;
    assert.deepEqual(
      tasks.map((t) => t.concurrency),
      [
        { group: 'deploy-main', limit: 1, mode: 'queue' },
        { group: 'org:db', limit: 2, mode: 'cancel_running' },
      ],
    );
  });

  test('bad groups are errors at their line', () => {
    const issues = shown(yaml`
      version: 1
      tasks:
        a: { script: [x], concurrency: { group: "" } }
        b: { script: [x], concurrency: { group: g, limit: 0 } }
        c: { script: [x], concurrency: { group: g, mode: wait } }
        d: { script: [x], concurrency: { group: "org:" } }
    `);
    assert.equal(issues.length, 4, issues.join('\n'));
    assert.match(issues[0] ?? '', /^3:\d+ tasks\.a\.concurrency\.group: must not be empty$/);
    assert.match(issues[1] ?? '', /^4:\d+ tasks\.b\.concurrency\.limit: must be at least 1$/);
    assert.match(
      issues[2] ?? '',
      /^5:\d+ tasks\.c\.concurrency\.mode: must be "queue" or "replace_pending" or "cancel_running"$/,
    );
    assert.match(
      issues[3] ?? '',
      /^6:\d+ tasks\.d\.concurrency\.group: an org: group needs a name after org:$/,
    );
  });
});
