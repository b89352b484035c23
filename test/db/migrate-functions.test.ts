// Function files (migrations/functions/<name>.sql): applied after the
// numbered migrations when their checksum differs from the one recorded in
// conductor_functions, once, whoever else migrates at the same time.
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import {
  createPool,
  type FunctionFile,
  loadFunctionFiles,
  loadMigrations,
  MigrationError,
  type MigrationSet,
  migrate,
  type Pool,
} from '../../lib/db/index.ts';
import { MIGRATION_LOCK } from '../../lib/db/migrate.ts';
import { createDatabase, dropDatabase, withDatabase } from '../../local/postgres.ts';
import { adminUrl, testDatabase } from '../helpers/db.ts';
import { until } from '../helpers/race.ts';

// Each test gets a fresh, unmigrated database so its starting point is known.
const base = await testDatabase(import.meta.filename, { migrate: false });
const pools: Pool[] = [];
const names: string[] = [];
async function freshDatabase(max = 4): Promise<{ pool: Pool; name: string }> {
  const name = `${base.name}_${names.length + 1}`;
  await createDatabase(adminUrl(), name);
  names.push(name);
  const pool = createPool({ url: withDatabase(adminUrl(), name), max });
  pools.push(pool);
  return { pool, name };
}
after(async () => {
  await Promise.all(pools.map((p) => p.end()));
  await Promise.all(names.map((name) => dropDatabase(adminUrl(), name)));
});

function answering(name: string, value: number): FunctionFile {
  return {
    name,
    sql: `create or replace function ${name}() returns integer language sql as $$ select ${value} $$;\n`,
  };
}

const schema: MigrationSet = {
  migrations: [{ id: 1, name: 'first', sql: 'create table a (x int)' }],
  functions: [answering('f_one', 1), answering('f_two', 2)],
};

async function recorded(pool: Pool): Promise<{ name: string; checksum: string; at: Date }[]> {
  const table = await pool.query("select to_regclass('conductor_functions') as t");
  if (table.rows[0].t === null) return [];
  const { rows } = await pool.query(
    'select name, checksum, applied_at as at from conductor_functions order by name',
  );
  return rows;
}

test('a fresh database gets the numbered migrations, then every function file, each recorded', async () => {
  const { pool } = await freshDatabase();
  const logged: string[] = [];
  const result = await migrate(pool, undefined, (l) => logged.push(l));
  const files = loadFunctionFiles();
  assert.equal(result.current, loadMigrations().length);
  assert.deepEqual(
    result.functions,
    files.map((f) => f.name),
  );
  assert.deepEqual(
    logged.filter((l) => l.startsWith('applied function')),
    files.map((f) => `applied function ${f.name}`),
  );
  assert.deepEqual(
    (await recorded(pool)).map((r) => r.name),
    files.map((f) => f.name),
  );
  const again = await migrate(pool);
  assert.deepEqual(again, { applied: [], functions: [], current: result.current });
});

test('a changed file is applied again once; an unchanged one is not', async () => {
  const { pool } = await freshDatabase();
  const first = await migrate(pool, schema);
  assert.deepEqual(first.functions, ['f_one', 'f_two']);
  const before = await recorded(pool);

  const changed: MigrationSet = {
    ...schema,
    functions: [answering('f_one', 10), schema.functions[1]!],
  };
  const second = await migrate(pool, changed);
  assert.deepEqual(second, { applied: [], functions: ['f_one'], current: 1 });
  const { rows } = await pool.query('select f_one() as one, f_two() as two');
  assert.deepEqual(rows, [{ one: 10, two: 2 }]);
  const after = await recorded(pool);
  assert.notEqual(after[0]!.checksum, before[0]!.checksum);
  assert.deepEqual(after[1], before[1], 'f_two was not applied again');

  const third = await migrate(pool, changed);
  assert.deepEqual(third.functions, [], 'applied once, not on every run');
  assert.deepEqual(await recorded(pool), after);
});

test('a plain list of migrations applies those only, and no function file', async () => {
  const { pool } = await freshDatabase();
  const result = await migrate(pool, schema.migrations);
  assert.deepEqual(result.functions, []);
  assert.deepEqual(await recorded(pool), []);
  const { rows } = await pool.query("select to_regproc('f_one') as f");
  assert.equal(rows[0].f, null);
});

test('function files commit with the last numbered migration: a failing file undoes it, naming the file', async () => {
  const { pool } = await freshDatabase();
  const broken: MigrationSet = {
    migrations: [
      { id: 1, name: 'first', sql: 'create table a (x int)' },
      { id: 2, name: 'second', sql: 'create table b (x int)' },
    ],
    functions: [
      answering('f_one', 1),
      {
        name: 'f_bad',
        sql: 'create or replace function f_bad() returns integer language sql as $$ select x from nowhere $$;',
      },
    ],
  };
  await assert.rejects(migrate(pool, broken), (err) => {
    assert.ok(err instanceof MigrationError);
    assert.match(err.message, /function file f_bad\.sql: relation "nowhere" does not exist/);
    return true;
  });
  // Migration 1 committed on its own; 2 and the files went back together.
  const { rows } = await pool.query('select id from conductor_migrations order by id');
  assert.deepEqual(rows, [{ id: 1 }]);
  const b = await pool.query("select to_regclass('public.b') as b, to_regproc('f_one') as f");
  assert.deepEqual(b.rows, [{ b: null, f: null }]);
  assert.deepEqual(await recorded(pool), []);

  const fixed = await migrate(pool, { ...broken, functions: [answering('f_one', 1)] });
  assert.deepEqual(fixed, { applied: [broken.migrations[1]], functions: ['f_one'], current: 2 });
});

test('migrators queued on the lock together apply a changed file once', async () => {
  const { pool, name } = await freshDatabase(12);
  await migrate(pool, schema);
  const changed: MigrationSet = {
    ...schema,
    functions: [answering('f_one', 3), schema.functions[1]!],
  };

  // Hold the migration lock while six migrators start, and let go only once
  // all six wait for it: each reads the recorded checksums only after the
  // one before it committed.
  const holder = await pool.connect();
  await holder.query('begin');
  await holder.query('select pg_advisory_xact_lock($1)', [MIGRATION_LOCK.toString()]);
  let results: Awaited<ReturnType<typeof migrate>>[];
  try {
    const running = Promise.all(Array.from({ length: 6 }, () => migrate(pool, changed)));
    await until('six migrators wait for the migration lock', async () => {
      const { rows } = await pool.query<{ n: number }>(
        `select count(*)::int as n from pg_locks l join pg_database d on d.oid = l.database
          where d.datname = $1 and l.locktype = 'advisory' and not l.granted`,
        [name],
      );
      return rows[0]!.n >= 6;
    });
    await holder.query('rollback');
    results = await running;
  } finally {
    await holder.query('rollback').catch(() => {});
    holder.release();
  }
  assert.deepEqual(
    results.flatMap((r) => r.functions),
    ['f_one'],
  );
  const { rows } = await pool.query('select f_one() as one');
  assert.equal(rows[0].one, 3);
});

test('function files are named after their function and replace it', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'conductor-fn-'));
  try {
    await writeFile(join(dir, 'f_one.sql'), answering('f_one', 1).sql);
    await writeFile(join(dir, 'README.md'), 'not a function');
    assert.deepEqual(loadFunctionFiles(dir), [answering('f_one', 1)]);
    await writeFile(join(dir, 'f_two.sql'), answering('f_one', 2).sql);
    assert.throws(
      () => loadFunctionFiles(dir),
      /"f_two.sql" must define its function with "create or replace function f_two\("/,
    );
    await writeFile(
      join(dir, 'f_two.sql'),
      'create function f_two() returns integer language sql as $$ select 2 $$;',
    );
    assert.throws(() => loadFunctionFiles(dir), /must define its function with "create or replace/);
    await rm(join(dir, 'f_two.sql'));
    await writeFile(join(dir, 'F-Two.sql'), answering('f_two', 2).sql);
    assert.throws(() => loadFunctionFiles(dir), /"F-Two.sql" is not <function_name>.sql/);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
