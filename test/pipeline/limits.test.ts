// Each compile limit of docs/limits.md, hit on purpose: the file is refused with one message that
// names the limit, at the line and column it was crossed. The hostile shapes are the ones found in
// issue #14 (a 500-way matrix of a 0.9 MB script, text aliases, hundreds of unknown needs).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { compilePipeline, PipelineError } from '../../lib/pipeline/index.ts';
import {
  MAX_JOB_BYTES,
  MAX_SUGGESTED_CHARS,
  MAX_SUGGESTION_CANDIDATES,
  MAX_SUGGESTIONS,
} from '../../lib/pipeline/limits.ts';
import { Suggester } from '../../lib/pipeline/messages.ts';
import { compile, issuesOf, onlyIssue, PUSH_MAIN, show } from './helpers.ts';

const numbers = (n: number) => Array.from({ length: n }, (_, i) => i).join(', ');

/** One task `t` whose script is one line of `size` x's, over a matrix of `ways` values. */
const matrixBomb = (size: number, ways: number) =>
  `version: 1\ntasks:\n  t:\n    script: ["${'x'.repeat(size)}"]\n    matrix: { v: [${numbers(ways)}] }\n`;

describe('compiled bytes per job', () => {
  test('a 0.9 MB script over a 256-way matrix stops at the task that takes the job past 10 MiB', () => {
    const text = matrixBomb(900_000, 256);
    assert.ok(Buffer.byteLength(text) < 1024 * 1024, 'the file itself is within its limit');
    // Each expansion weighs 900,021 to 900,023 bytes; the twelfth reaches 10,800,256.
    assert.equal(
      show(onlyIssue(text)),
      `3:3 tasks.t: the job's tasks reach 10800256 bytes with task "t (v: 11)"; at most ${MAX_JOB_BYTES} bytes (10 MiB) of tasks per job are allowed`,
    );
  });

  test('the same script over 11 values stays under 10 MiB and compiles', () => {
    const pipeline = compile(matrixBomb(900_000, 11));
    assert.equal(pipeline.tasks.length, 11);
    assert.equal(pipeline.tasks.at(-1)?.name, 't (v: 10)');
  });

  test('defaults merged into every task count in every task, and tasks left out by only count too', () => {
    const env = `"${'e'.repeat(700_000)}"`;
    // 16 tasks each inheriting 0.7 MB of defaults.env: 11.2 MB, though each task states none.
    const tasks = Array.from({ length: 16 }, (_, i) => `  t${i}: { script: [x], only: nowhere }`);
    const text = `version: 1\ndefaults:\n  env:\n    BIG: ${env}\ntasks:\n${tasks.join('\n')}\n`;
    const issue = onlyIssue(text);
    assert.equal(issue.path, 'tasks.t14');
    assert.equal(issue.line, 20);
    assert.match(issue.message, /^the job's tasks reach \d+ bytes with task "t14"; at most/);
  });
});

describe('compiled bytes per task', () => {
  test('a task over 1 MiB once merged with defaults.env is refused, naming its parts', () => {
    const text = [
      'version: 1',
      'defaults:',
      '  env:',
      `    BIG: &big "${'a'.repeat(600_000)}"`,
      'tasks:',
      '  small: { script: [x] }',
      '  big:',
      '    script: [x]',
      '    env:',
      '      MORE: *big',
      '',
    ].join('\n');
    assert.equal(
      show(onlyIssue(text)),
      '7:3 tasks.big: task "big" compiles to 1200028 bytes (script 3, env 1200015, the rest 10); at most 1048576 bytes (1 MiB) per task are allowed',
    );
    // A task's own value replaces the default, so it weighs only once.
    const overriding = text.replace('MORE: *big', 'BIG: *big');
    assert.equal(compile(overriding).tasks.length, 2);
  });

  test('text is weighed as a claim sends it: JSON-escaped', () => {
    // 200,000 control characters are 200 KB as text but 1.2 MB as JSON (\u0001 each).
    const text = `version: 1\ntasks:\n  t:\n    script: ["${'\\x01'.repeat(200_000)}"]\n`;
    assert.equal(
      show(onlyIssue(text)),
      '3:3 tasks.t: task "t" compiles to 1200008 bytes (script 1200002, env 0, the rest 6); at most 1048576 bytes (1 MiB) per task are allowed',
    );
  });

  test('a task may list at most 32 secrets', () => {
    const secrets = Array.from({ length: 33 }, (_, i) => `S${i}`).join(', ');
    assert.equal(
      show(onlyIssue(`version: 1\ntasks:\n  t: { script: [x], secrets: [${secrets}] }\n`)),
      '3:30 tasks.t.secrets: must list at most 32 secrets',
    );
  });
});

describe('aliases', () => {
  /** `script: [&a "<size y's>", *a, *a, ...]` with `copies` aliases, as in issue #14. */
  const textAliases = (size: number, copies: number) =>
    `version: 1\ntasks:\n  t:\n    script: [&a "${'y'.repeat(size)}"${', *a'.repeat(copies)}]\n`;

  test('aliases to text are counted by length: a 0.7 MB file may not copy 15 GB', () => {
    const text = textAliases(100_000, 150_000);
    assert.ok(Buffer.byteLength(text) < 1024 * 1024);
    // The 42nd copy of 100,000 bytes passes 4 MiB; it is the alias at column 100185.
    assert.equal(
      show(onlyIssue(text)),
      '4:100185 tasks.t.script[42]: aliases expand to more than 4194304 bytes (4 MiB) of text',
    );
  });

  test('41 copies of the same 100 KB stay within 4 MiB and compile; the 42nd does not', () => {
    const tasks = (copies: number) =>
      Array.from({ length: copies }, (_, i) => `  u${i}: { script: [*a] }`).join('\n');
    const text = (copies: number) =>
      `version: 1\ntasks:\n  t: { script: [&a "${'y'.repeat(100_000)}"] }\n${tasks(copies)}\n`;
    assert.equal(compile(text(41)).tasks.length, 42);
    assert.equal(
      show(onlyIssue(text(42))),
      '45:19 tasks.u41.script[0]: aliases expand to more than 4194304 bytes (4 MiB) of text',
    );
  });

  test('text inside an aliased map counts, its keys as well as its values', () => {
    const big = 'k'.repeat(1000);
    const copies = Array.from({ length: 4200 }, (_, i) => `      - *b${i % 2}`).join('\n');
    const text = `version: 1\ntasks:\n  t:\n    script: [x]\n    env:\n      B0: &b0 { ${big}: 1 }\n      B1: &b1 "${big}"\n    other:\n${copies}\n`;
    const issue = onlyIssue(text);
    assert.match(issue.message, /^aliases expand to more than 4194304 bytes \(4 MiB\) of text$/);
    assert.match(issue.path, /^tasks\.t\.other\[\d+\]$/);
  });
});

describe('task names', () => {
  test('a matrix whose names would pass 256 characters is refused, quoting the longest', () => {
    const text = `version: 1\ntasks:\n  t:\n    script: [x]\n    matrix: { os: [linux, "${'w'.repeat(300)}"], n: [${numbers(100)}] }\n`;
    assert.equal(
      show(onlyIssue(text)),
      `5:13 tasks.t.matrix: expands to task names of up to 315 characters, such as "t (os: ${'w'.repeat(53)}…"; at most 256 characters per task name are allowed`,
    );
  });
});

describe('suggestions', () => {
  // 450 tasks with 90-character names and one task needing 200 near misses of them: the file
  // that once cost 29.5 s of CPU in "did you mean".
  const stem = `task${'a'.repeat(80)}`;
  const tasks = Array.from({ length: 450 }, (_, i) => `  ${stem}${i}: { script: [x] }`);
  const needs = Array.from({ length: 200 }, (_, i) => `${stem}${i}q`).join(', ');
  const text = `version: 1\ntasks:\n${tasks.join('\n')}\n  z: { script: [x], needs: [${needs}] }\n`;

  test('200 unknown needs get suggestions for the first 20 only, at a bounded cost', () => {
    const cost = { suggestions: 0, cells: 0 };
    let issues: PipelineError['issues'] = [];
    try {
      compilePipeline(text, PUSH_MAIN, new Map(), cost);
    } catch (error) {
      assert.ok(error instanceof PipelineError);
      issues = error.issues;
    }
    assert.equal(cost.suggestions, MAX_SUGGESTIONS);
    // Each suggestion compares at most 1000 candidates, each only near the diagonal.
    const bound = MAX_SUGGESTIONS * MAX_SUGGESTION_CANDIDATES * MAX_SUGGESTED_CHARS * 5;
    assert.ok(cost.cells > 0 && cost.cells <= bound, `${cost.cells} cells`);
    const suggested = issues.filter((issue) => issue.message.includes('did you mean'));
    assert.equal(suggested.length, MAX_SUGGESTIONS);
    assert.match(suggested[0]?.message ?? '', /did you mean "taska+…"\?\)$/);
    assert.equal(suggested.at(-1)?.path, 'tasks.z.needs[19]');
  });

  test('at most 100 problems are reported, then one line counts the rest', () => {
    const issues = issuesOf(text);
    assert.equal(issues.length, 101);
    assert.equal(issues[99]?.path, 'tasks.z.needs[99]');
    const last = issues[100];
    assert.equal(last?.message, '100 more problems not shown; at most 100 problems are reported');
    // It points at the first problem it leaves out: the need after needs[99] and its ", ".
    const item = `${stem}99q, `;
    assert.deepEqual(
      [last?.line, last?.column, last?.path],
      [453, issues[99]!.column + item.length, ''],
    );
  });

  test('a word or candidate longer than 128 characters gets no suggestion', () => {
    const suggester = new Suggester();
    const long = 'b'.repeat(129);
    assert.equal(suggester.suggest(`${long}x`, [long]), '');
    assert.equal(suggester.suggest('bulid', [long, 'build']), ' (did you mean "build"?)');
    assert.equal(suggester.cells > 0 && suggester.cells < 30, true, `${suggester.cells} cells`);
  });

  test('the banded distance finds what the full one finds', () => {
    // The reference: Levenshtein with adjacent transpositions, every cell filled.
    const full = (a: string, b: string): number => {
      const d = Array.from({ length: a.length + 1 }, (_, i) =>
        Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)),
      );
      for (let i = 1; i <= a.length; i++) {
        for (let j = 1; j <= b.length; j++) {
          const row = d[i]!;
          const cost = a[i - 1] === b[j - 1] ? 0 : 1;
          row[j] = Math.min(d[i - 1]![j]! + 1, row[j - 1]! + 1, d[i - 1]![j - 1]! + cost);
          if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
            row[j] = Math.min(row[j]!, d[i - 2]![j - 2]! + 1);
          }
        }
      }
      return d[a.length]![b.length]!;
    };
    const word = fc.string({ unit: fc.constantFrom('a', 'b', 'c'), minLength: 3, maxLength: 12 });
    fc.assert(
      fc.property(word, fc.array(word, { maxLength: 8 }), (typo, candidates) => {
        const got = new Suggester().suggest(typo, candidates);
        const limit = Math.min(2, Math.floor(typo.length / 3));
        let best: string | null = null;
        let bestDistance = limit;
        for (const candidate of candidates) {
          const distance = full(typo, candidate);
          if (distance > 0 && distance <= bestDistance) {
            best = candidate;
            bestDistance = distance - 1;
          }
        }
        assert.equal(got, best === null ? '' : ` (did you mean ${JSON.stringify(best)}?)`);
      }),
      { numRuns: 2000 },
    );
  });
});
