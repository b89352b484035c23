import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { after, test } from 'node:test';
import pg from 'pg';
import { freePort, startEmbeddedPostgres, tempDirForCluster } from '../../local/postgres.ts';

// These start servers of their own, beside the one the test run shares.
const parent = await tempDirForCluster('conductor-local-');
after(() => rm(parent, { recursive: true, force: true }));

async function one<T>(url: string, sql: string): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query(sql)).rows[0] as T;
  } finally {
    await client.end();
  }
}

test('an embedded server keeps its data across a restart in its data directory', async () => {
  const dataDir = join(parent, 'kept');
  const first = await startEmbeddedPostgres({ dataDir });
  try {
    const settings = await one<{ max: string; listen: string }>(
      first.url(),
      "select current_setting('max_connections') as max, current_setting('listen_addresses') as listen",
    );
    assert.ok(Number(settings.max) > 100, 'max_connections is raised above the default 100');
    assert.equal(settings.listen, '127.0.0.1', 'it listens on loopback only');
    await first.createDatabase('app');
    await one(first.url('app'), 'create table kept (v text)');
    await one(first.url('app'), "insert into kept values ('still here')");
  } finally {
    await first.stop();
  }

  const second = await startEmbeddedPostgres({ dataDir });
  try {
    const row = await one<{ v: string }>(second.url('app'), 'select v from kept');
    assert.equal(row.v, 'still here');
    await second.dropDatabase('app');
    const gone = await one<{ n: number }>(
      second.url(),
      "select count(*)::int as n from pg_database where datname = 'app'",
    );
    assert.equal(gone.n, 0);
  } finally {
    await second.stop();
  }
  assert.ok(existsSync(join(dataDir, 'PG_VERSION')), 'stop keeps the data directory by default');
});

test('an embedded server listens on the port it is given, and can remove itself', async () => {
  const port = await freePort();
  const dataDir = join(parent, 'fixed');
  const server = await startEmbeddedPostgres({
    dataDir,
    port,
    maxConnections: 150,
    removeOnStop: true,
  });
  try {
    assert.equal(server.port, port);
    assert.match(server.url('x'), new RegExp(`:${port}/x$`));
    const row = await one<{ max: string }>(
      server.url(),
      "select current_setting('max_connections') as max",
    );
    assert.equal(row.max, '150');
  } finally {
    await server.stop();
  }
  assert.ok(!existsSync(dataDir), 'removeOnStop deletes the data directory');
});

test('a database name that is not a plain identifier is refused before reaching SQL', async () => {
  const server = await startEmbeddedPostgres({
    dataDir: join(parent, 'names'),
    removeOnStop: true,
  });
  try {
    await assert.rejects(
      server.createDatabase('x"; drop database postgres; --'),
      /invalid database name/,
    );
  } finally {
    await server.stop();
  }
});
