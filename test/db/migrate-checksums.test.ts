// Applied migrations are immutable (issue #49): the migrator records each
// one's checksum, refuses to go on when an applied file changed (naming it),
// adopts databases migrated before checksums were kept, and a repair records
// a changed file without running it.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import {
  ChangedMigrationError,
  createPool,
  expectationOf,
  loadMigrationSet,
  type Migration,
  migrate,
  migrationChecksum,
  type Pool,
  repairMigrations,
  schemaStatus,
} from '../../lib/db/index.ts';
import { createDatabase, dropDatabase, withDatabase } from '../../local/postgres.ts';
import { adminUrl, testDatabase } from '../helpers/db.ts';

const base = await testDatabase(import.meta.filename, { migrate: false });
const pools: Pool[] = [];
const names: string[] = [];
async function freshPool(): Promise<Pool> {
  const name = `${base.name}_${names.length + 1}`;
  await createDatabase(adminUrl(), name);
  names.push(name);
  const pool = createPool({ url: withDatabase(adminUrl(), name), max: 2 });
  pools.push(pool);
  return pool;
}
after(async () => {
  await Promise.all(pools.map((p) => p.end()));
  await Promise.all(names.map((name) => dropDatabase(adminUrl(), name)));
});

const toy: Migration[] = [
  { id: 1, name: 'first', sql: 'create table a (id int primary key)' },
  { id: 2, name: 'second', sql: 'create table b (id int primary key)' },
];
const third: Migration = { id: 3, name: 'third', sql: 'create table c (id int primary key)' };
const toyExpectation = (list: Migration[]) => expectationOf({ migrations: list, functions: [] });

test('each applied migration is recorded with the checksum of its file, and the schema reads as current', async () => {
  const pool = await freshPool();
  await migrate(pool);
  const set = loadMigrationSet();
  const { rows } = await pool.query(
    'select id, checksum, checksum_source from conductor_migrations order by id',
  );
  assert.deepEqual(
    rows,
    set.migrations.map((m) => ({
      id: m.id,
      checksum: migrationChecksum(m),
      checksum_source: 'applied',
    })),
  );
  assert.deepEqual(await schemaStatus(pool), { current: true });
});

test('an applied migration changed on disk stops the migrator, naming the file; nothing later is applied', async () => {
  const pool = await freshPool();
  await migrate(pool, toy);
  const edited = [toy[0]!, { ...toy[1]!, sql: `${toy[1]!.sql}; -- tidied` }, third];
  await assert.rejects(
    () => migrate(pool, edited),
    (err: Error) =>
      err instanceof ChangedMigrationError &&
      err.file === '002_second.sql' &&
      /migration 002_second\.sql was changed after it was applied/.test(err.message) &&
      /npm run migrate -- repair/.test(err.message),
  );
  const { rows } = await pool.query(`select to_regclass('c') as c, max(id) as top
    from conductor_migrations`);
  assert.equal(rows[0].c, null, 'migration 3 did not run');
  assert.equal(rows[0].top, 2);
  const status = await schemaStatus(pool, toyExpectation(edited));
  assert.deepEqual(status, {
    current: false,
    reason: 'migration 002_second.sql differs from the one applied',
  });
});

test('the repair records the changed file without running it; migrating then goes on', async () => {
  const pool = await freshPool();
  await migrate(pool, toy);
  // Were the new text run, this would fail: table b exists.
  const edited = [
    toy[0]!,
    { ...toy[1]!, sql: 'create table b (id int primary key, x int)' },
    third,
  ];
  const logged: string[] = [];
  const { repaired } = await repairMigrations(pool, edited, (l) => logged.push(l));
  assert.deepEqual(
    repaired.map((r) => r.file),
    ['002_second.sql'],
  );
  assert.match(logged.join('\n'), /recorded 002_second\.sql as it is now/);
  const cols = await pool.query(
    `select count(*)::int as n from information_schema.columns where table_name = 'b'`,
  );
  assert.equal(cols.rows[0].n, 1, 'the repair ran none of the new text');
  const result = await migrate(pool, edited);
  assert.deepEqual(
    result.applied.map((m) => m.id),
    [3],
  );
  const { rows } = await pool.query(
    'select id, checksum_source from conductor_migrations order by id',
  );
  assert.deepEqual(
    rows.map((r) => r.checksum_source),
    ['applied', 'repaired', 'applied'],
  );
  // A second repair finds nothing.
  assert.deepEqual((await repairMigrations(pool, edited)).repaired, []);
});

test('a database migrated before checksums were kept is adopted once, saying so, and then guarded', async () => {
  const pool = await freshPool();
  await migrate(pool, toy);
  // The bookkeeping table as every release before issue #49 left it.
  await pool.query(`alter table conductor_migrations
    drop column checksum, drop column checksum_source, drop column checksum_at`);
  assert.deepEqual(await schemaStatus(pool, toyExpectation(toy)), { current: true });
  const logged: string[] = [];
  await migrate(pool, toy, (l) => logged.push(l));
  assert.deepEqual(logged, [
    'recorded the checksum of 001_first.sql (applied before checksums were kept)',
    'recorded the checksum of 002_second.sql (applied before checksums were kept)',
  ]);
  const { rows } = await pool.query('select checksum_source from conductor_migrations order by id');
  assert.deepEqual(
    rows.map((r) => r.checksum_source),
    ['adopted', 'adopted'],
  );
  const again: string[] = [];
  await migrate(pool, toy, (l) => again.push(l));
  assert.deepEqual(again, []);
  await assert.rejects(
    () => migrate(pool, [toy[0]!, { ...toy[1]!, sql: 'select 1' }]),
    ChangedMigrationError,
  );
});

test('a file checked out with CRLF line endings has the checksum of the same file with LF', () => {
  const lf = { sql: 'create table a (\n  id int\n);\n' };
  assert.equal(migrationChecksum({ sql: lf.sql.replaceAll('\n', '\r\n') }), migrationChecksum(lf));
  assert.notEqual(migrationChecksum({ sql: `${lf.sql} ` }), migrationChecksum(lf));
});

test('the schema is not current with a migration missing or a function file not applied', async () => {
  const pool = await freshPool();
  assert.deepEqual(await schemaStatus(pool, toyExpectation(toy)), {
    current: false,
    reason: 'no migration has been applied',
  });
  await migrate(pool, [toy[0]!]);
  assert.deepEqual(await schemaStatus(pool, toyExpectation(toy)), {
    current: false,
    reason: 'migration 002_second.sql is not applied',
  });
  await migrate(pool, toy);
  const withFunction = expectationOf({
    migrations: toy,
    functions: [
      {
        name: 'f',
        sql: 'create or replace function f() returns int language sql as $$ select 1 $$',
      },
    ],
  });
  assert.deepEqual(await schemaStatus(pool, withFunction), {
    current: false,
    reason: 'function file f.sql is not applied as it is',
  });
});
