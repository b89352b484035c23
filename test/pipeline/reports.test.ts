// `reports: {junit: [...]}` (issue #54): compiled onto the task as the runner
// receives it, and refused at the line when it is wrong.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { pipelineJsonSchema } from '../../lib/pipeline/json-schema.ts';
import { compile, issuesOf, onlyIssue, show, yaml } from './helpers.ts';

test('reports.junit is compiled onto the task, with every expansion of a matrix', () => {
  const pipeline = compile(yaml`
    version: 1
    tasks:
      test:
        matrix:
          node: [20, 22]
        script: [npm test]
        reports:
          junit: ["reports/*.xml", target/surefire-reports/TEST-x.xml]
      lint:
        script: [npm run lint]
  `);
  for (const task of pipeline.tasks.filter((t) => t.baseName === 'test')) {
    assert.deepEqual(task.storage?.reports, {
      junit: ['reports/*.xml', 'target/surefire-reports/TEST-x.xml'],
    });
  }
  assert.equal(pipeline.tasks.find((t) => t.name === 'lint')?.storage?.reports, undefined);
});

test('a wrong reports: is a pipeline error at its line, naming the field', () => {
  const base = (body: string) =>
    `version: 1\ntasks:\n  test:\n    script: [make]\n    reports:\n${body}`;
  assert.equal(
    show(onlyIssue(base('      junit: ["../secret.xml"]\n'))),
    '6:15 tasks.test.reports.junit[0]: must not leave the checkout ("..")',
  );
  assert.match(
    show(onlyIssue(base('      junit: []\n'))),
    /^6:\d+ tasks\.test\.reports\.junit: must list at least one path/,
  );
  const many = JSON.stringify(Array.from({ length: 21 }, (_, i) => `r${i}.xml`));
  assert.match(
    show(onlyIssue(base(`      junit: ${many}\n`))),
    /reports\.junit: must list at most 20 paths/,
  );
  assert.deepEqual(issuesOf(base('      junt: [a.xml]\n')).map(show), [
    '6:7 tasks.test.reports: missing required key "junit"',
    '6:7 tasks.test.reports: unknown key "junt" (did you mean "junit"?)',
  ]);
});

test('the JSON Schema that editors and `conductor schema` use knows reports.junit', () => {
  const schema = JSON.stringify(pipelineJsonSchema());
  assert.match(schema, /"reports":\{[\s\S]*"junit"/);
});
