// What `npm start` and `conductor server` print (#48), run as a person runs
// them (a child process): one line for the migrations, then the banner with
// the next step; a busy port, or a second server on the same data directory,
// is one clear line before any initdb or migration.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readlink, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { tempDirForCluster } from '../../local/postgres.ts';
import { runScript } from '../helpers/server-process.ts';

const dataDir = await tempDirForCluster('conductor-serve-output-');
after(async () => {
  // As root the cluster lives under /var/lib/conductor/clusters, its link here.
  const link = await readlink(join(dataDir, 'pg')).catch(() => null);
  if (link) await rm(link, { recursive: true, force: true });
  await rm(dataDir, { recursive: true, force: true });
});

const start = () =>
  runScript('scripts/start.ts', [], {
    PORT: '0',
    CONDUCTOR_DATA_DIR: dataDir,
    CONDUCTOR_SWEEP_INTERVAL_S: '3600',
  });

// The lines printed before the banner, less the one as root about where the cluster was put.
function beforeBanner(output: string): string[] {
  const lines = output.split('\n');
  return lines
    .slice(
      0,
      lines.findIndex((l) => l.startsWith('Conductor is running at')),
    )
    .filter((l) => !/^made .* for the cluster/.test(l));
}

test('npm start prints one line for the migrations, then the banner with the next step; a second server on its data directory is refused in one line', async () => {
  const first = start();
  await first.waitFor(/Stop it with Ctrl-C/, 120_000);
  assert.deepEqual(beforeBanner(first.output()), [
    first
      .output()
      .match(/^migrations: applied \d+ migrations and \d+ functions, now at migration \d+$/m)?.[0],
  ]);
  assert.doesNotMatch(first.output(), /applied migration|"level"/);
  assert.match(first.output(), /\nNext: conductor project create --id NAME/);

  const second = start();
  const code = await second.exited;
  assert.equal(code, 1);
  assert.equal(
    second.output(),
    `another conductor server (pid ${first.child.pid}) uses the data directory ${dataDir}: stop it first, or give this one another CONDUCTOR_DATA_DIR\n`,
  );
  assert.equal(await first.stop(), 0);
  assert.equal(existsSync(join(dataDir, 'server.pid')), false, 'the stop lets the directory go');

  // A pid file left by a server that is gone (a crash) does not hold the directory.
  await writeFile(join(dataDir, 'server.pid'), '2147483646\n');
  const again = start();
  await again.waitFor(/Stop it with Ctrl-C/, 120_000);
  assert.deepEqual(beforeBanner(again.output()), [
    again.output().match(/^migrations: up to date \(migration \d+\)$/m)?.[0],
  ]);
  assert.equal(await again.stop(), 0);
});

test('conductor server on a port in use says so in one line, before making anything', async () => {
  const holder = createServer();
  await new Promise<void>((r) => holder.listen(0, '127.0.0.1', r));
  after(() => new Promise<void>((r) => holder.close(() => r())));
  const port = (holder.address() as { port: number }).port;
  const fresh = join(dataDir, 'never-made');
  const server = runScript('scripts/server.ts', ['--port', String(port)], {
    CONDUCTOR_DATA_DIR: fresh,
  });
  assert.equal(await server.exited, 1);
  assert.equal(
    server.output(),
    `port ${port} on 127.0.0.1 is in use (another conductor server?): stop what listens there, or pick another port with --port or PORT\n`,
  );
  assert.equal(existsSync(fresh), false, 'no data directory, cluster or migration');
});
