// The JSON Schema editors check .conductor.yml with (`conductor schema`,
// made from the compiler's zod definitions): every example the reference
// shows passes it, and the compiler tests' broken files that are wrong in
// shape fail it, as they fail the compiler.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import { Ajv } from 'ajv';
import { parse } from 'yaml';
import { compilePipeline, PipelineError } from '../../lib/pipeline/index.ts';
import { pipelineJsonSchema } from '../../lib/pipeline/json-schema.ts';

const schema = pipelineJsonSchema();
// strict: false: zod writes `pattern`s with \p{...} that ajv's strict mode
// would refuse to compile without the u flag; editors read them as given.
const check = new Ajv({ strict: false, allErrors: true }).compile(schema);
const valid = (text: string) => check(parse(text, { merge: true }));

const reference = readFileSync(new URL('../../docs/pipeline.md', import.meta.url), 'utf8');
const TOP_LEVEL = ['version', 'name', 'defaults', 'inputs', 'concurrency', 'include', 'tasks'];

/**
 * The reference's YAML examples, each as a whole file: a file as given; a
 * fragment of top-level keys with `version: 1` (and a task when it has
 * none); a map of tasks under `tasks:`.
 */
function examples(): string[] {
  return [...reference.matchAll(/```ya?ml\n([\s\S]*?)```/g)].map(([, block = '']) => {
    const doc = parse(block, { merge: true }) as Record<string, unknown>;
    const keys = Object.keys(doc);
    if (keys.includes('version')) return block;
    if (keys.every((k) => TOP_LEVEL.includes(k))) {
      return `version: 1\n${block}${keys.includes('tasks') ? '' : 'tasks:\n  t:\n    script: [x]\n'}`;
    }
    return `version: 1\ntasks:\n${block.replace(/^/gm, '  ')}`;
  });
}

describe('the pipeline JSON Schema', () => {
  test('every YAML example in docs/pipeline.md validates against it', () => {
    const all = examples();
    assert.ok(all.length >= 10, `found ${all.length} examples`);
    for (const text of all) {
      assert.ok(valid(text), `${JSON.stringify(check.errors)}\n${text}`);
    }
  });

  // From test/pipeline/errors.test.ts and compile.test.ts: files wrong in shape.
  const task = (body: string) => `version: 1\ntasks:\n  t: ${body}\n`;
  const broken = [
    'tasks: { t: { script: [x] } }\n',
    'version: 2\ntasks: { t: { script: [x] } }\n',
    'version: "1"\ntasks: { t: { script: [x] } }\n',
    'version: 1\n',
    'version: 1\ntask:\n  t: { script: [x] }\n',
    'version: 1\nstages: [a]\ntasks: { t: { script: [x] } }\n',
    `version: 1\nname: ${'n'.repeat(101)}\ntasks: { t: { script: [x] } }\n`,
    task('{ script: [] }'),
    task('{ script: [make, 3] }'),
    task('{ script: make }'),
    task('{ image: node }'),
    task('{ script: [x], scirpt: [y] }'),
    task('{ script: [x], retries: 11 }'),
    task('{ script: [x], env: { 1X: a } }'),
    task('{ script: [x], secrets: [OK, not-ok] }'),
    task('{ script: [x], when: sometimes }'),
    task('{ script: [x], block: { prompt: go } }'),
    task('{ block: { prompt: go, on_timeout: later } }'),
    task('{ block: { prompt: go }, timeout: 5m }'),
    task('{ block: { prompt: go }, outputs: [x] }'),
    task('{ script: [x], concurrency: { limit: 2 } }'),
    task('{ script: [x], cache: { key: k } }'),
    task('{ script: [x], artifacts: { paths: [] } }'),
  ];

  test('the broken files of the compiler tests fail it, as they fail the compiler', () => {
    for (const text of broken) {
      assert.throws(
        () => compilePipeline(text, { ref: 'refs/heads/main', event: 'push' }),
        PipelineError,
        text,
      );
      assert.equal(valid(text), false, `the schema accepts:\n${text}`);
    }
  });

  test('it is draft-07, names itself, and leaves hidden tasks partial', () => {
    assert.equal(schema.$schema, 'http://json-schema.org/draft-07/schema#');
    assert.match(String(schema.$id), /conductor\.schema\.json$/);
    assert.ok(
      valid('version: 1\ntasks:\n  .base: { image: node }\n  t: { extends: .base, script: [x] }\n'),
    );
  });
});
