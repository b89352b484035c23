// The runner's artifact and cache `paths` go through the compile's matcher
// (issue #46): before, picomatch's backtracking expressions could hold a
// runner for minutes on one pattern and one long file name.
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { findFiles, StorageError } from '../../runner/artifacts.ts';

const root = await mkdtemp(join(tmpdir(), 'conductor-paths-match-'));
after(() => rm(root, { recursive: true, force: true }));

await mkdir(join(root, 'dist/sub'), { recursive: true });
await mkdir(join(root, 'a'.repeat(200)), { recursive: true });
await writeFile(join(root, 'dist/app.js'), 'x');
await writeFile(join(root, 'dist/sub/.map'), 'x');
await writeFile(join(root, 'README.md'), 'x');
await writeFile(join(root, 'a'.repeat(200), 'a'.repeat(200)), 'x');
await writeFile(join(root, 'a'.repeat(250)), 'x');

const paths = async (patterns: string[]) =>
  (await findFiles(root, patterns)).map((f) => f.path).sort();

test('paths keep their meaning: a directory takes everything under it, globs, braces, dot files', async () => {
  assert.deepEqual(await paths(['dist']), ['dist/app.js', 'dist/sub/.map']);
  assert.deepEqual(await paths(['./dist/']), ['dist/app.js', 'dist/sub/.map']);
  assert.deepEqual(await paths(['dist/*.js']), ['dist/app.js']);
  assert.deepEqual(await paths(['**/.map', '{README,LICENSE}.md']), ['README.md', 'dist/sub/.map']);
});

test('a hostile pattern against long names is decided at once', async () => {
  const started = Date.now();
  assert.deepEqual(await paths([`${'*a'.repeat(31)}b`, `**/${'*a'.repeat(30)}/x`]), []);
  assert.ok(Date.now() - started < 1000, `took ${Date.now() - started} ms`);
});

test('an extglob that reached a runner fails the task, naming the pattern syntax', async () => {
  await assert.rejects(
    findFiles(root, ['*(a)b']),
    (error: unknown) => error instanceof StorageError && /extglob syntax/.test(error.message),
  );
});
