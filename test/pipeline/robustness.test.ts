import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { stringify } from 'yaml';
import {
  type CompileResult,
  compilePipeline,
  MAX_PIPELINE_BYTES,
  needsFiles,
  PipelineError,
  type Trigger,
} from '../../lib/pipeline/index.ts';
import { compiled } from './helpers.ts';

const TRIGGERS: Trigger[] = [
  { ref: 'refs/heads/main', event: 'push' },
  { ref: 'refs/tags/v1.0', event: 'tag' },
  { ref: 'refs/pull/3/head', event: 'pull_request', baseRef: 'main' },
];

function assertWellFormed(result: CompileResult): void {
  // An include names files to read: a well-formed answer too, with nothing compiled yet.
  if (needsFiles(result)) {
    assert.ok(result.toRead.every((path) => typeof path === 'string' && path !== ''));
    return;
  }
  const pipeline = result;
  const names = pipeline.tasks.map((task) => task.name);
  assert.equal(new Set(names).size, names.length, 'compiled names are unique');
  pipeline.tasks.forEach((task, index) => {
    assert.equal(task.position, index);
    for (const need of task.needs) {
      assert.ok(names.indexOf(need) !== -1, `need ${need} of ${task.name} is compiled`);
    }
    assert.ok(task.maxAttempts >= 1 && task.timeoutS > 0);
  });
}

/** The contract: a compiled pipeline, or a PipelineError with well-formed issues; nothing else. */
function compilesOrRejectsCleanly(text: string, trigger: Trigger = TRIGGERS[0] as Trigger): void {
  let pipeline: CompileResult;
  try {
    pipeline = compilePipeline(text, trigger);
  } catch (error) {
    assert.ok(error instanceof PipelineError, `threw ${String(error)} for ${JSON.stringify(text)}`);
    assert.ok(error.issues.length > 0);
    for (const issue of error.issues) {
      assert.ok(Number.isInteger(issue.line) && issue.line >= 1, JSON.stringify(issue));
      assert.ok(Number.isInteger(issue.column) && issue.column >= 1, JSON.stringify(issue));
      assert.equal(typeof issue.path, 'string');
      assert.ok(issue.message.length > 0, JSON.stringify(issue));
      // The catch-all keeps the contract, but reaching it means a bug worth seeing here.
      assert.ok(!issue.message.startsWith('internal compiler error'), issue.message);
    }
    return;
  }
  assertWellFormed(pipeline);
}

const VALID = {
  version: 1,
  name: 'ci',
  defaults: { image: 'node:20', timeout: '30m', retries: 1, env: { CI: true }, labels: ['linux'] },
  tasks: {
    build: { script: ['npm ci'], outputs: ['artifact'], secrets: ['NPM_TOKEN'] },
    test: {
      script: ['npm test'],
      needs: ['build'],
      matrix: { node: [18, 20], os: ['linux', 'mac'] },
      env: { LEVEL: 3 },
    },
    deploy: { script: ['deploy'], needs: ['test'], only: ['main', 'v*'], allow_failure: true },
  },
};

const KEYS = [
  ...Object.keys(VALID),
  ...Object.keys(VALID.tasks),
  ...Object.keys(VALID.tasks.test),
  ...Object.keys(VALID.defaults),
  'timeout',
  'labels',
  'node',
  '__proto__',
  'constructor',
  'toString',
  '<<',
];

// A path into the document and a value to put there: mutations of a valid pipeline reach the
// checks far more often than random text does.
const mutation = fc.tuple(
  fc.array(fc.oneof(fc.constantFrom(...KEYS), fc.nat(3)), { minLength: 1, maxLength: 4 }),
  fc.oneof(
    fc.anything({ maxDepth: 2, maxKeys: 4 }),
    fc.constantFrom(
      'build',
      'test',
      'deploy',
      '*',
      '90s',
      '0',
      -1,
      Number.POSITIVE_INFINITY,
      Number.NaN,
      2 ** 60,
      null,
      [],
      {},
    ),
  ),
);

function mutate(mutations: Array<[Array<string | number>, unknown]>): unknown {
  const doc: unknown = structuredClone(VALID);
  for (const [path, value] of mutations) {
    let target: unknown = doc;
    for (const segment of path.slice(0, -1)) {
      const next =
        typeof target === 'object' && target !== null && Object.hasOwn(target, segment)
          ? (target as Record<string | number, unknown>)[segment]
          : undefined;
      target = next;
    }
    const last = path.at(-1);
    if (typeof target === 'object' && target !== null && last !== undefined) {
      // defineProperty, so a `__proto__` key becomes a real key of the document.
      Object.defineProperty(target, last, {
        value,
        enumerable: true,
        writable: true,
        configurable: true,
      });
    }
  }
  return doc;
}

function stringifyOrNull(value: unknown): string | null {
  try {
    return stringify(value);
  } catch {
    return null;
  }
}

const YAML_TOKENS = [
  'version: 1\n',
  'tasks:\n',
  '  t:\n',
  '    script: [x]\n',
  '    needs: [t]\n',
  '- ',
  ': ',
  '? ',
  '[',
  ']',
  '{',
  '}',
  ', ',
  '&a ',
  '*a',
  '<<: ',
  '!!str ',
  '!!binary ',
  '%YAML 1.1\n',
  '---\n',
  '...\n',
  '"',
  "'",
  '|\n',
  '#',
  '\n',
  '  ',
  '\t',
  'matrix: {k: [1, 1]}',
  '__proto__: ',
  '1e999',
  '0x',
];

describe('the compiler only ever throws PipelineError', () => {
  test('for arbitrary text', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 300 }), (text) =>
        compilesOrRejectsCleanly(text),
      ),
      { numRuns: 500 },
    );
  });

  test('for text made of YAML syntax', () => {
    fc.assert(
      fc.property(fc.array(fc.constantFrom(...YAML_TOKENS), { maxLength: 40 }), (tokens) =>
        compilesOrRejectsCleanly(tokens.join('')),
      ),
      { numRuns: 500 },
    );
  });

  test('for YAML renderings of arbitrary values', () => {
    fc.assert(
      fc.property(fc.anything({ maxDepth: 4 }), (value) => {
        const text = stringifyOrNull(value);
        if (text !== null) compilesOrRejectsCleanly(text);
      }),
      { numRuns: 300 },
    );
  });

  test('for a valid pipeline with random keys and values injected', () => {
    fc.assert(
      fc.property(
        fc.array(mutation, { maxLength: 4 }),
        fc.constantFrom(...TRIGGERS),
        (mutations, trigger) => {
          const text = stringifyOrNull(mutate(mutations));
          if (text !== null) compilesOrRejectsCleanly(text, trigger);
        },
      ),
      { numRuns: 300 },
    );
  });

  test('the unmutated pipeline used above compiles', () => {
    const pipeline = compiled(
      compilePipeline(stringify(VALID), { ref: 'refs/heads/main', event: 'push' }),
    );
    assert.equal(pipeline.tasks.length, 6);
  });

  test('for hostile documents', () => {
    const hostile = [
      '{'.repeat(MAX_PIPELINE_BYTES),
      '- '.repeat(MAX_PIPELINE_BYTES / 2),
      `a: ${'"'.repeat(10_000)}`,
      '\u0000\uffff\ud800 binary \u001b[31m',
      'version: 1\ntasks: { t: { script: [x], retries: 1e999, timeout: 123456789012345678901234567890 } }',
      '%YAML 1.1\n---\nversion: 1\ntasks: { t: { script: [x], env: { D: 2024-01-01, B: !!binary aGk= } } }',
      'version: 1\ntasks: !!omap [ t: { script: [x] } ]',
      'version: 1\ntasks: !!set { ? t }',
      'version: 1\ntasks: { t: { <<: [1, 2], script: [x] } }',
      'version: 1\ntasks: { ? [complex, key] : { script: [x] } }',
      'version: 1\ntasks: { *undefined : { script: [x] } }',
      'version: 1\n&a tasks: { t: { script: [*a] } }',
      'version: 1\ntasks: &t { t: { script: [x], env: *t } }',
      'version: !!js/function "() => 1"\ntasks: {}',
    ];
    for (const text of hostile) compilesOrRejectsCleanly(text);
  });
});
