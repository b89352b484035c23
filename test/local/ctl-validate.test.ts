// `ctl validate`: a pipeline file checked with the server's compiler, on this
// machine, with no server (no fetch is made: the io's fetch fails the test).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { runCtl } from '../../cli/ctl.ts';
import { compilePipeline, formatIssue, PipelineError } from '../../lib/pipeline/index.ts';

const root = await mkdtemp(join(tmpdir(), 'conductor-validate-'));
after(() => rm(root, { recursive: true, force: true }));

/** Runs `ctl validate ...args` in `cwd`. */
async function validate(cwd: string, ...args: string[]) {
  const lines: string[] = [];
  const code = await runCtl(['validate', ...args], {
    out: (l) => lines.push(l),
    env: {},
    cwd,
    fetch: () => assert.fail('validate needs no server'),
  });
  return { code, out: lines.join('\n') };
}

/** A folder under the test's root holding `files`; a git repository on `branch` if given. */
async function folder(
  name: string,
  files: Record<string, string>,
  branch?: string,
): Promise<string> {
  const dir = join(root, name);
  for (const [path, text] of Object.entries(files)) {
    await mkdir(join(dir, path, '..'), { recursive: true });
    await writeFile(join(dir, path), text);
  }
  if (branch) execFileSync('git', ['init', '-q', '-b', branch], { cwd: dir });
  return dir;
}

const PIPELINE = `version: 1
name: shop
tasks:
  build:
    script: [make]
  test:
    needs: [build]
    matrix:
      node: [18, 20]
    script: [make test]
  lint:
    allow_failure: true
    script: [make lint]
  publish:
    needs: [test]
    only: "refs/tags/*"
    secrets: [NPM_TOKEN]
    script: [npm publish]
  announce:
    needs: [publish]
    script: [say done]
`;

test('a valid file prints the tasks a push of the current branch runs, and those only leaves out', async () => {
  const dir = await folder('valid', { '.conductor.yml': PIPELINE }, 'feature/cart');
  const { code, out } = await validate(dir);
  assert.equal(code, 0, out);
  assert.equal(
    out,
    [
      '.conductor.yml: valid (shop); a push of refs/heads/feature/cart (the current branch) runs 4 tasks:',
      '  build',
      '  test (node: 18)  needs build',
      '  test (node: 20)  needs build',
      '  lint             allowed to fail',
      'left out for refs/heads/feature/cart:',
      '  publish   only: refs/tags/* does not match refs/heads/feature/cart',
      '  announce  needs publish, left out',
    ].join('\n'),
  );
});

test('a matrix with exclude and include is shown expanded, keys in the order written, with fail_fast and services', async () => {
  const dir = await folder(
    'matrix',
    {
      '.conductor.yml': `version: 1
tasks:
  test:
    image: node:22
    fail_fast: true
    services:
      db: {image: postgres:16, health: pg_isready}
    matrix:
      node: ["20", "22"]
      os: [linux, arm]
      exclude: [{node: "20", os: arm}]
      include: [{node: "23", os: linux, experimental: "true"}, {node: "22", os: arm, slow: "yes"}]
    script: [npm test]
`,
    },
    'main',
  );
  const { code, out } = await validate(dir);
  assert.equal(code, 0, out);
  assert.equal(
    out,
    [
      '.conductor.yml: valid; a push of refs/heads/main (the current branch) runs 4 tasks:',
      '  test (node: 20, os: linux)                      fail fast · services db',
      '  test (node: 22, os: linux)                      fail fast · services db',
      '  test (node: 22, os: arm, slow: yes)             fail fast · services db',
      '  test (node: 23, os: linux, experimental: true)  fail fast · services db',
    ].join('\n'),
  );

  // An exclude naming a key the matrix lacks is an error at its line and column.
  await writeFile(
    join(dir, '.conductor.yml'),
    'version: 1\ntasks:\n  test:\n    matrix:\n      node: ["20"]\n      exclude: [{nod: "20"}]\n    script: [npm test]\n',
  );
  const bad = await validate(dir);
  assert.equal(bad.code, 1, bad.out);
  assert.match(
    bad.out,
    /^\.conductor\.yml:6:18: tasks\.test\.matrix\.exclude\[0\]\.nod: "nod" is not a key of this matrix \(did you mean "node"\?\)$/m,
  );
});

test('--ref picks the ref: a tag runs what only keeps for tags', async () => {
  const dir = await folder('tag', { '.conductor.yml': PIPELINE }, 'main');
  const { code, out } = await validate(dir, '--ref', 'refs/tags/v1.2');
  assert.equal(code, 0, out);
  assert.match(
    out,
    /^\.conductor\.yml: valid \(shop\); a push of refs\/tags\/v1\.2 runs 6 tasks:$/m,
  );
  assert.match(
    out,
    /^ {2}publish {10}needs test \(node: 18\), test \(node: 20\) · secrets NPM_TOKEN$/m,
  );
  assert.match(out, /^ {2}announce {9}needs publish$/m);
  assert.doesNotMatch(out, /left out/);
  // A bare name is a branch, as a manual trigger takes it.
  assert.match(
    (await validate(dir, '--ref', 'release')).out,
    /a push of refs\/heads\/release runs/,
  );
});

test('outside a git repository the ref is assumed, and the output says so', async () => {
  const dir = await folder('no-git', { 'ci.yml': PIPELINE });
  const { code, out } = await validate(dir, 'ci.yml');
  assert.equal(code, 0, out);
  assert.match(
    out,
    /^ci\.yml: valid \(shop\); a push of refs\/heads\/main \(assumed: no current branch here; give --ref\) runs 4 tasks:$/m,
  );
});

test('an invalid file prints the errors the server would store, file:line:column: path: message, and exits 1', async () => {
  const text = `version: 1
tasks:
  build:
    script: [make]
    allow_failures: true
  test:
    needs: [biuld]
    script: [make test]
`;
  const dir = await folder('invalid', { 'sub/.conductor.yml': text });
  const { code, out } = await validate(dir, 'sub/.conductor.yml');
  assert.equal(code, 1, out);
  // What the compile of a job stores, with the path as typed in place of .conductor.yml.
  let stored: string[] = [];
  try {
    compilePipeline(text, { ref: 'refs/heads/main', event: 'push' });
    assert.fail('the pipeline compiles');
  } catch (err) {
    assert.ok(err instanceof PipelineError);
    stored = err.issues.map((i) => formatIssue(i));
  }
  assert.equal(stored.length, 2);
  assert.equal(
    out,
    [
      ...stored.map((line) => line.replace(/^\.conductor\.yml:/, 'sub/.conductor.yml:')),
      'sub/.conductor.yml: 2 problems; a job would fail with them',
    ].join('\n'),
  );
  assert.match(
    out,
    /^sub\/\.conductor\.yml:5:5: tasks\.build: unknown key "allow_failures" \(did you mean "allow_failure"\?\)$/m,
  );
  assert.match(out, /^sub\/\.conductor\.yml:7:13: tasks\.test\.needs\[0\]: unknown task "biuld"/m);
});

test('included files are read from the working tree beside the pipeline file; their problems name them from here', async () => {
  const dir = await folder('include', {
    'app/.conductor.yml': `version: 1
include: [ci/test.yml, ci/missing.yml]
tasks:
  build:
    script: [make]
`,
    'app/ci/test.yml': `tasks:
  test:
    needs: [build]
    scirpt: [make test]
`,
  });
  const bad = await validate(dir, 'app/.conductor.yml');
  assert.equal(bad.code, 1, bad.out);
  assert.match(
    bad.out,
    /^app\/\.conductor\.yml:2:24: include\[1\]: "ci\/missing\.yml" does not exist in the working tree$/m,
  );
  assert.match(bad.out, /^app\/ci\/test\.yml:4:5: tasks\.test: unknown key "scirpt"/m);

  await writeFile(
    join(dir, 'app/.conductor.yml'),
    'version: 1\ninclude: ci/test.yml\ntasks:\n  build:\n    script: [make]\n',
  );
  await writeFile(
    join(dir, 'app/ci/test.yml'),
    'tasks:\n  test:\n    needs: [build]\n    script: [make test]\n',
  );
  const good = await validate(join(dir, 'app'), '--ref', 'main');
  assert.equal(good.code, 0, good.out);
  assert.match(good.out, /runs 2 tasks:\n {2}build\n {2}test {3}needs build$/);
});

test('no file, or more than one, is a usage error (exit 2)', async () => {
  const missing = await validate(root, 'nope.yml');
  assert.equal(missing.code, 2);
  assert.equal(missing.out, 'no pipeline file at nope.yml');
  const two = await validate(root, 'a.yml', 'b.yml');
  assert.equal(two.code, 2);
  assert.match(two.out, /too many arguments for 'validate'/);
});
