import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import {
  createPool,
  loadFunctionFiles,
  loadMigrations,
  type Migration,
  MigrationError,
  migrate,
  type Pool,
} from '../../lib/db/index.ts';
import { createDatabase, dropDatabase, withDatabase } from '../../local/postgres.ts';
import { adminUrl, testDatabase } from '../helpers/db.ts';

// Each test gets a fresh, unmigrated database so its starting point is known.
const base = await testDatabase(import.meta.filename, { migrate: false });
const pools: Pool[] = [];
const names: string[] = [];
async function freshPool(max = 4): Promise<Pool> {
  const name = `${base.name}_${names.length + 1}`;
  await createDatabase(adminUrl(), name);
  names.push(name);
  const pool = createPool({ url: withDatabase(adminUrl(), name), max });
  pools.push(pool);
  return pool;
}
after(async () => {
  await Promise.all(pools.map((p) => p.end()));
  await Promise.all(names.map((name) => dropDatabase(adminUrl(), name)));
});

/** Tables, columns, constraints and indexes of the public schema, as text. */
async function schemaOf(pool: Pool): Promise<string> {
  const { rows } = await pool.query(`
    select 'column ' || table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, '') as line
      from information_schema.columns where table_schema = 'public'
    union all
    select 'constraint ' || conrelid::regclass || ' ' || conname || ' ' || pg_get_constraintdef(oid)
      from pg_constraint where connamespace = 'public'::regnamespace
    union all
    select 'index ' || indexdef from pg_indexes where schemaname = 'public'
    order by 1`);
  return rows.map((r) => r.line).join('\n');
}

test('a fresh database gets every migration, in order, each recorded', async () => {
  const pool = await freshPool();
  const logged: string[] = [];
  const all = loadMigrations();
  const result = await migrate(pool, all, (l) => logged.push(l));
  assert.deepEqual(
    result.applied.map((m) => m.id),
    all.map((m) => m.id),
  );
  assert.equal(result.current, all.length);
  assert.equal(logged.length, all.length);
  const { rows } = await pool.query('select id, name from conductor_migrations order by id');
  assert.deepEqual(
    rows,
    all.map((m) => ({ id: m.id, name: m.name })),
  );
  const tables = await pool.query(
    "select table_name from information_schema.tables where table_schema = 'public' order by 1",
  );
  for (const t of ['projects', 'jobs', 'tasks', 'task_attempts', 'log_chunks', 'workers']) {
    assert.ok(
      tables.rows.some((r) => r.table_name === t),
      `table ${t} exists`,
    );
  }
});

test('migrating twice changes nothing', async () => {
  const pool = await freshPool();
  await migrate(pool);
  const before = await schemaOf(pool);
  const recorded = await pool.query('select id, applied_at from conductor_migrations order by id');
  const again = await migrate(pool);
  assert.deepEqual(again.applied, []);
  assert.equal(await schemaOf(pool), before);
  const after = await pool.query('select id, applied_at from conductor_migrations order by id');
  assert.deepEqual(after.rows, recorded.rows, 'no migration was recorded again');
});

test('concurrent migrators apply each migration exactly once', async () => {
  const pool = await freshPool(12);
  const results = await Promise.all(Array.from({ length: 6 }, () => migrate(pool)));
  const applied = results.flatMap((r) => r.applied.map((m) => m.id)).sort((a, b) => a - b);
  assert.deepEqual(
    applied,
    loadMigrations().map((m) => m.id),
  );
  const { rows } = await pool.query('select count(*)::int as c from conductor_migrations');
  assert.equal(rows[0].c, loadMigrations().length);
  // And each function file once, by whichever applied the last migration.
  assert.deepEqual(
    results.flatMap((r) => r.functions).sort(),
    loadFunctionFiles()
      .map((f) => f.name)
      .sort(),
  );
});

test('a database ahead of the code is refused', async () => {
  const pool = await freshPool();
  await migrate(pool);
  await pool.query("insert into conductor_migrations (id, name) values (999, 'from_the_future')");
  await assert.rejects(migrate(pool), (err) => {
    assert.ok(err instanceof MigrationError);
    assert.match(err.message, /has migration 999 \(from_the_future\).*deploy the newer code/);
    return true;
  });
});

test('a recorded migration whose name differs from the code is refused', async () => {
  const pool = await freshPool();
  const one: Migration[] = [{ id: 1, name: 'first', sql: 'create table a (x int)' }];
  await migrate(pool, one);
  await assert.rejects(
    migrate(pool, [{ ...one[0]!, name: 'renamed' }]),
    /migration 1 is "first" in the database but "renamed" in the code/,
  );
});

test('a failing migration rolls back whole and keeps the ones before it', async () => {
  const pool = await freshPool();
  const list: Migration[] = [
    { id: 1, name: 'good', sql: 'create table good (x int)' },
    { id: 2, name: 'bad', sql: 'create table half (x int); select 1/0;' },
  ];
  await assert.rejects(migrate(pool, list), /division by zero/);
  const { rows } = await pool.query('select id from conductor_migrations order by id');
  assert.deepEqual(rows, [{ id: 1 }]);
  const half = await pool.query("select to_regclass('public.half') as t");
  assert.equal(half.rows[0].t, null, 'the failed migration left no table behind');
  // Fixed code then goes forward from where it stopped.
  const fixed = await migrate(pool, [
    list[0]!,
    { id: 2, name: 'bad', sql: 'create table half (x int)' },
  ]);
  assert.deepEqual(
    fixed.applied.map((m) => m.id),
    [2],
  );
});

test('migration files must be numbered without gaps and named NNN_name.sql', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'conductor-mig-'));
  try {
    await writeFile(join(dir, '001_first.sql'), 'select 1');
    await writeFile(join(dir, '003_third.sql'), 'select 1');
    assert.throws(() => loadMigrations(dir), /without gaps; found 3 at position 2/);
    await rm(join(dir, '003_third.sql'));
    await writeFile(join(dir, '2-second.sql'), 'select 1');
    assert.throws(() => loadMigrations(dir), /"2-second.sql" is not NNN_name.sql/);
    await rm(join(dir, '2-second.sql'));
    await writeFile(join(dir, 'README.md'), 'not a migration');
    assert.deepEqual(
      loadMigrations(dir).map((m) => m.name),
      ['first'],
    );
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
