// include: through the real webhook and compile (issue #34): the files a pipeline includes are
// read from the same commit through the forge's API, as .conductor.yml is; an error in one
// fails the job naming that file and its line.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type Json, pushToBranch, startE2E, waitForJob } from './calls.ts';
import { sha } from './payloads.ts';

const REPO = 'acme/includes';
const {
  fake,
  stack,
  projects: { project },
} = await startE2E(import.meta.filename, {
  projects: {
    project: { forge: 'github', id: 'includes', repo: REPO, cancel_superseded: false },
  },
});

let branches = 0;
async function push(commit: string): Promise<string> {
  return pushToBranch(stack, { repo: REPO, secret: project.secret }, commit, `b${++branches}`);
}

const MAIN = `version: 1
include: [ci/tests.yml]
tasks:
  build:
    script: [make]
`;

test('a pipeline with include: compiles its included files of the same commit into one job', async () => {
  const commit = sha('include-ok');
  fake.setFile(REPO, commit, MAIN);
  fake.setFile(
    REPO,
    commit,
    'include: [ci/common.yml]\ntasks:\n  test:\n    extends: .node\n    needs: [build]\n    matrix: { v: [1, 2] }\n    script: [npm test]\n',
    'ci/tests.yml',
  );
  fake.setFile(REPO, commit, 'tasks:\n  .node:\n    image: node:20\n', 'ci/common.yml');
  // Another commit's copy must never be read: the files come from the pushed commit only.
  fake.setFile(REPO, sha('elsewhere'), 'tasks: { evil: { script: [x] } }\n', 'ci/tests.yml');

  const view = await waitForJob(stack, await push(commit));
  assert.equal(view.job.state, 'running', JSON.stringify(view.job));
  assert.deepEqual(
    view.tasks.map((t: Json) => [t.name, t.image]),
    [
      ['build', null],
      ['test (v: 1)', 'node:20'],
      ['test (v: 2)', 'node:20'],
    ],
  );
  const paths = fake.requestsFor(commit).map((r) => r.path.replace(/^.*\/contents\//, ''));
  assert.deepEqual(paths, ['.conductor.yml', 'ci/tests.yml', 'ci/common.yml']);
});

test('an error in an included file fails the job naming that file, its line and column', async () => {
  const commit = sha('include-broken');
  fake.setFile(REPO, commit, MAIN);
  fake.setFile(REPO, commit, 'tasks:\n  test:\n    script: [t]\n    timeout: 0\n', 'ci/tests.yml');
  const view = await waitForJob(stack, await push(commit));
  assert.equal(view.job.state, 'failed');
  assert.deepEqual(view.tasks, []);
  assert.equal(view.job.error, 'ci/tests.yml:4:14: tasks.test.timeout: must be positive, got 0');
  assert.deepEqual(view.job.errors, [
    {
      line: 4,
      column: 14,
      path: 'tasks.test.timeout',
      message: 'must be positive, got 0',
      file: 'ci/tests.yml',
    },
  ]);
});

test('an included file the commit lacks fails the job at the include that names it', async () => {
  const commit = sha('include-missing');
  fake.setFile(REPO, commit, MAIN);
  const view = await waitForJob(stack, await push(commit));
  assert.equal(view.job.state, 'failed');
  assert.equal(view.job.error, `.conductor.yml:2:11: include[0]: no ci/tests.yml at ${commit}`);
});
