// The shorter forms users of other CIs write (#48): `concurrency: GROUP`
// (GitHub Actions' string form) and `changes: PATTERN` (one pattern, as
// `only:` takes one branch) mean what their long forms mean.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Ajv } from 'ajv';
import { parse } from 'yaml';
import { pipelineJsonSchema } from '../../lib/pipeline/json-schema.ts';
import { compile, onlyIssue, show } from './helpers.ts';

const check = new Ajv({ strict: false }).compile(pipelineJsonSchema());
const file = (body: string) => `version: 1\ntasks:\n  deploy:\n    script: [./deploy]\n${body}`;

describe('shorthands', () => {
  test('concurrency: GROUP is the group with limit 1, queued, on a task and at the top', () => {
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the placeholder as the pipeline writes it
    const short = compile(file('    concurrency: deploy-${ref}\n')).tasks[0]!;
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the placeholder as the pipeline writes it
    const long = compile(file('    concurrency:\n      group: deploy-${ref}\n')).tasks[0]!;
    assert.deepEqual(short.concurrency, { group: 'deploy-main', limit: 1, mode: 'queue' });
    assert.deepEqual(short.concurrency, long.concurrency);
    const top = compile(`version: 1\nconcurrency: whole\ntasks:\n  a:\n    script: [x]\n`);
    assert.deepEqual(top.concurrency, { group: 'whole', limit: 1, mode: 'queue' });
    assert.ok(check(parse(file('    concurrency: deploy\n'))));
  });

  test('changes: PATTERN is a list of that one pattern', () => {
    const short = compile(file('    changes: src/**\n')).tasks[0]!;
    assert.deepEqual(short.changes, { include: ['src/**'], exclude: [] });
    assert.ok(check(parse(file('    changes: src/**\n'))));
  });

  test('a wrong value still names what the field takes', () => {
    assert.match(
      show(onlyIssue(file('    changes: 3\n'))),
      /tasks\.deploy\.changes: expected a path pattern, a list of them or a map/,
    );
    assert.match(show(onlyIssue(file('    concurrency: ""\n'))), /tasks\.deploy\.concurrency/);
    assert.equal(check(parse(file('    concurrency: 3\n'))), false);
  });
});

describe('a misspelt when:', () => {
  test('when: allways is an error at its line that suggests always', () => {
    assert.equal(
      show(onlyIssue(file('    when: allways\n'))),
      '5:11 tasks.deploy.when: expected on_success, on_failure, always or a map of status, trigger and schedule, got "allways" (did you mean "always"?)',
    );
  });
});
