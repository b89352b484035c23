// An artifact's archive is unpacked without privilege (#37 review): a root
// runner keeps neither the archive's owner nor a setuid bit a task set on its
// own file, and leaves out FIFOs and devices, so no task can hand the next one
// a setuid-root binary in $CONDUCTOR_ARTIFACTS.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmod, chown, lstat, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import * as tar from 'tar';
import { unpack } from '../../runner/artifacts.ts';

const root = await mkdtemp(join(tmpdir(), 'conductor-unpack-'));
after(() => rm(root, { recursive: true, force: true }));

test('a setuid file comes out with its permission bits only, owned by whoever unpacks; a FIFO is left out', async () => {
  const src = join(root, 'src');
  await mkdir(join(src, 'bin'), { recursive: true });
  await writeFile(join(src, 'bin', 'sh'), '#!/bin/sh\nid\n');
  execFileSync('mkfifo', [join(src, 'pipe')]);
  // As root (CI and the runner's default), the archive also names another owner.
  const asRoot = process.getuid?.() === 0;
  if (asRoot) await chown(join(src, 'bin', 'sh'), 4321, 4321);
  // After the chown, which clears them.
  await chmod(join(src, 'bin', 'sh'), 0o6755);
  await chmod(join(src, 'bin'), 0o1777);
  const archive = join(root, 'a.tar.gz');
  // GNU tar records the FIFO as one (node-tar would open and read it).
  execFileSync('tar', ['-czf', archive, '-C', src, 'bin', 'pipe']);
  const listed: string[] = [];
  await tar.list({
    file: archive,
    onReadEntry: (e) => listed.push(`${e.path} ${e.type} ${(e.mode ?? 0).toString(8)}`),
  });
  assert.ok(
    listed.includes('bin/sh File 6755'),
    `the archive carries the setuid bits: ${listed.join('; ')}`,
  );

  const out = join(root, 'out');
  await unpack(archive, out);
  const sh = await lstat(join(out, 'bin', 'sh'));
  assert.equal(sh.mode & 0o7777, 0o755, 'no setuid or setgid bit');
  assert.equal((await lstat(join(out, 'bin'))).mode & 0o7000, 0, 'no sticky bit');
  assert.equal(sh.uid, process.getuid?.(), "owned by whoever unpacked it, not the archive's owner");
  await assert.rejects(lstat(join(out, 'pipe')), { code: 'ENOENT' }, 'the FIFO is left out');
});
