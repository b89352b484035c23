// An org: concurrency group spans projects, so a pipeline may name one only
// when its project is in it (the project's org_groups, issue #46).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { compile, issuesOf, PUSH_MAIN, yaml } from './helpers.ts';

const text = yaml`
  version: 1
  concurrency: { group: "org:release" }
  tasks:
    deploy:
      script: [x]
      concurrency: { group: "org:Prod-\${CONDUCTOR_REF}", mode: cancel_running }
    other:
      script: [x]
      only: [nowhere]
      concurrency: { group: "org:elsewhere" }
`;
const NOT_IN = (group: string, list: string) =>
  `the project is not in the concurrency group ${group} (its org_groups: ${list}); an admin adds it to the project's org_groups`;

test('a pipeline naming an org: group its project is not in is an error naming the group, at its line', () => {
  const issues = issuesOf(text, { ...PUSH_MAIN, orgGroups: ['prod-main'] }).map(
    (i) => `${i.line} ${i.path}: ${i.message}`,
  );
  // A task `only:` leaves out on this ref is checked too: the file is wrong on every branch.
  assert.deepEqual(issues, [
    `2 concurrency.group: ${NOT_IN('org:release', 'prod-main')}`,
    `10 tasks.other.concurrency.group: ${NOT_IN('org:elsewhere', 'prod-main')}`,
  ]);
  const none = issuesOf(text, { ...PUSH_MAIN, orgGroups: [] });
  assert.equal(none.length, 3);
  assert.match(none[1]?.message ?? '', /org:prod-main \(its org_groups: none\)/);
});

test('a project in every group it names compiles; a group name is resolved and lower-cased first', () => {
  const pipeline = compile(text, {
    ...PUSH_MAIN,
    orgGroups: ['prod-main', 'release', 'elsewhere'],
  });
  assert.equal(pipeline.tasks[0]?.concurrency?.group, 'org:prod-main');
  assert.equal(pipeline.concurrency?.group, 'org:release');
});

test('without a project (validate) org: groups are not checked', () => {
  assert.equal(compile(text).concurrency?.group, 'org:release');
});
