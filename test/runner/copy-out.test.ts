// The runner reads a task's artifacts and cache paths after its script, and
// may be root; a process of the task that left its process group may still
// be running. Between the walk that found the files and the read, it can
// swap a file for a link to a host file, or a directory above a file for a
// link to /etc (#28 review, left open in the last stop). The runner now reads
// only through a descriptor checked to be a regular file inside the checkout
// (openInside) and uploads its own copy (copyOut). Each swap is made here
// after findFiles, as the leftover process would make it, so the outcome
// does not depend on timing.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  chmod,
  chown,
  link,
  lstat,
  mkdir,
  mkdtemp,
  readFile,
  readlink,
  rename,
  rm,
  stat,
  statfs,
  symlink,
  truncate,
  utimes,
  writeFile,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { checkArtifactDirs, copyOut, findFiles, StorageError } from '../../runner/artifacts.ts';
import { fillKey } from '../../runner/cache.ts';

const root = await mkdtemp(join(tmpdir(), 'conductor-copy-out-'));
after(() => rm(root, { recursive: true, force: true }));

/** A checkout with dist/app (0755), dist/lib/a.txt and a link dist/current -> app; a host dir with a secret. */
async function setUp() {
  const base = await mkdtemp(join(root, 'case-'));
  const workspace = join(base, 'workspace');
  const host = join(base, 'host');
  const secret = `host-secret-${randomBytes(8).toString('hex')}`;
  await mkdir(join(workspace, 'dist', 'lib'), { recursive: true });
  await mkdir(host);
  await writeFile(join(host, 'app'), secret);
  await writeFile(join(host, 'a.txt'), secret);
  await writeFile(join(workspace, 'dist', 'app'), '#!/bin/sh\necho built\n');
  await chmod(join(workspace, 'dist', 'app'), 0o755);
  await writeFile(join(workspace, 'dist', 'lib', 'a.txt'), 'library\n');
  await symlink('app', join(workspace, 'dist', 'current'));
  const copy = await mkdtemp(join(base, 'copy-'));
  return { workspace, host, secret, copy };
}

async function refusal(p: Promise<unknown>): Promise<StorageError> {
  const err = await p.then(
    () => assert.fail('expected a StorageError'),
    (e: unknown) => e,
  );
  assert.ok(err instanceof StorageError, `a StorageError, not ${String(err)}`);
  return err;
}

test('the copy holds the files as they were found: contents, an executable bit, a link as a link', async () => {
  const { workspace, copy } = await setUp();
  const files = await findFiles(workspace, ['dist']);
  await copyOut(workspace, files, copy);
  assert.equal(await readFile(join(copy, 'dist', 'app'), 'utf8'), '#!/bin/sh\necho built\n');
  assert.equal((await stat(join(copy, 'dist', 'app'))).mode & 0o111, 0o111);
  assert.equal(await readFile(join(copy, 'dist', 'lib', 'a.txt'), 'utf8'), 'library\n');
  assert.ok((await lstat(join(copy, 'dist', 'current'))).isSymbolicLink());
  assert.equal(await readlink(join(copy, 'dist', 'current')), 'app');
});

test('a file swapped for a link to a host file after the walk is not read', async () => {
  const { workspace, host, secret, copy } = await setUp();
  const files = await findFiles(workspace, ['dist/app']);
  assert.deepEqual(
    files.map((f) => [f.path, f.link]),
    [['dist/app', false]],
  );
  await rm(join(workspace, 'dist', 'app'));
  await symlink(join(host, 'app'), join(workspace, 'dist', 'app'));
  const err = await refusal(copyOut(workspace, files, copy));
  assert.match(err.message, /dist\/app became a link after it was found/);
  assert.doesNotMatch(err.message, new RegExp(secret));
  await assert.rejects(readFile(join(copy, 'dist', 'app')), { code: 'ENOENT' });
});

test('a directory above a file swapped for a link to a host directory after the walk is not read through', async () => {
  const { workspace, host, secret, copy } = await setUp();
  const files = await findFiles(workspace, ['dist/lib']);
  assert.deepEqual(
    files.map((f) => f.path),
    ['dist/lib/a.txt'],
  );
  await rename(join(workspace, 'dist', 'lib'), join(workspace, 'dist', 'lib-old'));
  await symlink(host, join(workspace, 'dist', 'lib'));
  const err = await refusal(copyOut(workspace, files, copy));
  assert.equal(err.message, 'dist/lib/a.txt is gone or outside the checkout: not read');
  assert.doesNotMatch(err.message, new RegExp(secret));
  await assert.rejects(readFile(join(copy, 'dist', 'lib', 'a.txt')), { code: 'ENOENT' });
});

test('a link whose directory was swapped for a link to a host directory is not read (its target is not copied)', async () => {
  const { workspace, host, copy } = await setUp();
  await symlink('/etc/hostname', join(host, 'current'));
  const files = await findFiles(workspace, ['dist/current']);
  await rename(join(workspace, 'dist'), join(workspace, 'dist-old'));
  await symlink(host, join(workspace, 'dist'));
  const err = await refusal(copyOut(workspace, files, copy));
  assert.equal(err.message, 'dist is gone or outside the checkout: not read');
});

test('a file swapped for a FIFO after the walk fails at once, naming it, instead of waiting for a writer', async () => {
  const { workspace, copy } = await setUp();
  const files = await findFiles(workspace, ['dist/app']);
  await rm(join(workspace, 'dist', 'app'));
  execFileSync('mkfifo', [join(workspace, 'dist', 'app')]);
  const err = await refusal(copyOut(workspace, files, copy));
  assert.match(err.message, /dist\/app is not a regular file/);
});

test("a cache key's {{ hash }} does not read through a directory swapped for a link to a host directory", async () => {
  const { workspace, host } = await setUp();
  const key = "deps-{{ hash 'dist/lib/a.txt' }}";
  const before = await fillKey(key, workspace);
  assert.match(before, /^deps-[0-9a-f]{64}$/);
  await rename(join(workspace, 'dist', 'lib'), join(workspace, 'dist', 'lib-old'));
  await symlink(host, join(workspace, 'dist', 'lib'));
  const err = await refusal(fillKey(key, workspace));
  assert.equal(err.message, "hash 'dist/lib/a.txt': no regular file there inside the checkout");
});

test('a directory above a file swapped for a link to /dev: nothing there is opened, the path is refused as outside', async () => {
  const { workspace, copy } = await setUp();
  await writeFile(join(workspace, 'dist', 'lib', 'null'), 'x');
  const files = await findFiles(workspace, ['dist/lib/null']);
  await rename(join(workspace, 'dist', 'lib'), join(workspace, 'dist', 'lib-old'));
  await symlink('/dev', join(workspace, 'dist', 'lib'));
  // Had /dev/null been opened (a device's open runs its driver), the answer
  // would have been "is not a regular file".
  const err = await refusal(copyOut(workspace, files, copy));
  assert.equal(err.message, 'dist/lib/null is gone or outside the checkout: not read');
});

test('a FIFO outside the checkout, reached through a swapped directory, is never opened: its writer stays blocked', async () => {
  const { workspace, host, copy } = await setUp();
  await writeFile(join(workspace, 'dist', 'lib', 'q'), 'x');
  execFileSync('mkfifo', [join(host, 'q')]);
  const files = await findFiles(workspace, ['dist/lib/q']);
  // A host process waits in open() for a reader of its FIFO.
  const writer = spawn('sh', ['-c', `echo request > '${join(host, 'q')}'`], { stdio: 'ignore' });
  const ended = new Promise<string>((resolve) => writer.on('exit', () => resolve('released')));
  await rename(join(workspace, 'dist', 'lib'), join(workspace, 'dist', 'lib-old'));
  await symlink(host, join(workspace, 'dist', 'lib'));
  const err = await refusal(copyOut(workspace, files, copy));
  assert.equal(err.message, 'dist/lib/q is gone or outside the checkout: not read');
  // An open for reading would have released it at once; a second is ample.
  const state = await Promise.race([
    ended,
    new Promise<string>((resolve) => setTimeout(() => resolve('blocked'), 1_000)),
  ]);
  writer.kill();
  assert.equal(state, 'blocked');
});

test('a sparse file over half the free space is refused before anything is copied', async () => {
  const { workspace, copy } = await setUp();
  await writeFile(join(workspace, 'dist', 'big'), '');
  const free = await statfs(copy).then((s) => Number(s.bavail) * Number(s.bsize));
  // Holes: no disk in the checkout, all of it in a copy, and its archive
  // after it. Under the free space, but not twice under it.
  await truncate(join(workspace, 'dist', 'big'), Math.floor(free * 0.75));
  const files = await findFiles(workspace, ['dist/big']);
  const err = await refusal(copyOut(workspace, files, copy));
  assert.match(
    err.message,
    /^the files matched hold \d+ bytes; the runner copies and archives them where \d+ bytes are free, and needs twice their size$/,
  );
  await assert.rejects(stat(join(copy, 'dist', 'big')), { code: 'ENOENT' });
});

test("a cache key's {{ hash }} answers alike for a missing file and one outside, and names no host path", async () => {
  const { workspace, host } = await setUp();
  await symlink(host, join(workspace, 'h'));
  const answers = [];
  for (const name of ['h/app', 'h/nothing-here', 'missing.txt']) {
    const err = await refusal(fillKey(`k-{{ hash '${name}' }}`, workspace));
    answers.push(err.message.replace(name, '<name>'));
    assert.doesNotMatch(err.message, new RegExp(host));
  }
  assert.deepEqual(
    answers,
    Array(3).fill("hash '<name>': no regular file there inside the checkout"),
  );
});

test('a top-level name that starts with two dots is inside the checkout; the copy keeps modes and times whatever the umask', async () => {
  const { workspace, copy } = await setUp();
  await writeFile(join(workspace, '..env'), 'A=1\n');
  await writeFile(join(workspace, 'dist', 'lib', 'old.txt'), 'old\n', { mode: 0o644 });
  const then = new Date('2020-01-01T00:00:00Z');
  await utimes(join(workspace, 'dist', 'lib', 'old.txt'), then, then);
  const files = await findFiles(workspace, ['..env', 'dist/lib/old.txt']);
  assert.deepEqual(
    files.map((f) => f.path),
    ['..env', 'dist/lib/old.txt'],
  );
  const umask = process.umask(0o077);
  try {
    await copyOut(workspace, files, copy);
  } finally {
    process.umask(umask);
  }
  assert.equal(await readFile(join(copy, '..env'), 'utf8'), 'A=1\n');
  const info = await stat(join(copy, 'dist', 'lib', 'old.txt'));
  assert.equal(info.mode & 0o777, 0o644);
  assert.equal(info.mtime.toISOString(), then.toISOString());
});

test("two needed tasks whose artifact directories would meet ('/' becomes '_') are refused, naming both", () => {
  assert.doesNotThrow(() => checkArtifactDirs(['build (os: a/b)', 'test', 'build (os: a/b)']));
  assert.throws(
    () => checkArtifactDirs(['build (os: a/b)', 'test', 'build (os: a_b)']),
    (err: unknown) =>
      err instanceof StorageError &&
      err.message ===
        'tasks "build (os: a/b)" and "build (os: a_b)" would share $CONDUCTOR_ARTIFACTS/build (os: a_b)/ (a / in a name becomes _); rename one of them',
  );
});

test("a hard link to a file the checkout's owner does not own is not read; one to its own file is", async () => {
  const { workspace, host, secret, copy } = await setUp();
  // The checkout belongs to the build user (uid 4321 here, as root; as
  // anyone else, to them), and a host file to someone else.
  const asRoot = process.getuid?.() === 0;
  const owner = asRoot ? 4321 : process.getuid!();
  if (asRoot) {
    for (const path of [workspace, join(workspace, 'dist'), join(workspace, 'dist', 'app')]) {
      await chown(path, owner, owner);
    }
  }
  await link(join(workspace, 'dist', 'app'), join(workspace, 'dist', 'own-link'));
  await link(join(host, 'app'), join(workspace, 'dist', 'host-link'));
  const hostOwned = (await stat(join(host, 'app'))).uid !== owner;
  const files = await findFiles(workspace, ['dist/own-link', 'dist/host-link']);
  if (hostOwned) {
    const err = await refusal(copyOut(workspace, files, copy));
    assert.equal(
      err.message,
      "dist/host-link is a hard link to a file the checkout's owner does not own",
    );
    assert.doesNotMatch(err.message, new RegExp(secret));
  } else {
    // Not root: every file is the runner's own, and a link to one is read.
    await copyOut(workspace, files, copy);
    assert.equal(await readFile(join(copy, 'dist', 'host-link'), 'utf8'), secret);
  }
  const own = await mkdtemp(join(root, 'own-'));
  await copyOut(
    workspace,
    files.filter((f) => f.path === 'dist/own-link'),
    own,
  );
  assert.equal(await readFile(join(own, 'dist', 'own-link'), 'utf8'), '#!/bin/sh\necho built\n');
});
