// Every SQL function has one home, migrations/functions/<name>.sql: the
// database the migrations build has exactly the functions those files
// define, each exactly as its file defines it (arguments, result, settings
// and body). A function redefined in a numbered migration, or one that has no
// file, fails here.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { loadFunctionFiles } from '../../lib/db/index.ts';
import { testDatabase } from '../helpers/db.ts';

const db = await testDatabase(import.meta.filename);
const files = loadFunctionFiles();

/** The functions of the public schema that no extension brought, with their full definitions. */
async function databaseFunctions(schema: string): Promise<Map<string, string>> {
  const { rows } = await db.pool.query<{ name: string; def: string }>(
    `select p.proname as name, pg_get_functiondef(p.oid) as def
       from pg_proc p
      where p.pronamespace = $1::regnamespace
        and not exists (select 1 from pg_depend d
                         where d.classid = 'pg_proc'::regclass and d.objid = p.oid
                           and d.deptype = 'e')
      order by 1, 2`,
    [schema],
  );
  const defs = new Map<string, string>();
  for (const r of rows) {
    // Overloads would share a file: kept together, in a fixed order.
    const def = r.def.replaceAll(`${schema}.`, '');
    defs.set(r.name, defs.has(r.name) ? `${defs.get(r.name)}\n${def}` : def);
  }
  return defs;
}

test('every function of the database has a file, and every file a function', async () => {
  assert.ok(files.length >= 5, 'the claim, the success, the settle and the follow-up helpers');
  const names = [...(await databaseFunctions('public')).keys()].sort();
  assert.deepEqual(names, files.map((f) => f.name).sort());
});

test("each function's definition in the database is its file's, exactly", async () => {
  const live = await databaseFunctions('public');
  // Each file run again into a schema of its own (first on the search path,
  // so its `create or replace function` lands there; the types it names
  // still resolve in public), then both definitions compared as PostgreSQL
  // prints them. Rolled back: nothing stays.
  const client = await db.pool.connect();
  let fromFiles: { name: string; def: string }[];
  try {
    await client.query('begin');
    await client.query('create schema from_files');
    await client.query('set local search_path = from_files, public');
    for (const f of files) await client.query(f.sql);
    ({ rows: fromFiles } = await client.query<{ name: string; def: string }>(
      `select p.proname as name, pg_get_functiondef(p.oid) as def
         from pg_proc p where p.pronamespace = 'from_files'::regnamespace order by 1, 2`,
    ));
  } finally {
    await client.query('rollback');
    client.release();
  }
  const expected = new Map<string, string>();
  for (const r of fromFiles) {
    const def = r.def.replaceAll('from_files.', '');
    expected.set(r.name, expected.has(r.name) ? `${expected.get(r.name)}\n${def}` : def);
  }
  for (const f of files) {
    assert.ok(expected.has(f.name), `${f.name}.sql defines ${f.name}`);
    assert.equal(live.get(f.name), expected.get(f.name), `${f.name} differs from its file`);
  }
});

test("the body the database runs is the file's text between its dollar quotes", async () => {
  const { rows } = await db.pool.query<{ name: string; src: string }>(
    `select proname as name, prosrc as src from pg_proc
      where pronamespace = 'public'::regnamespace and proname = any($1)`,
    [files.map((f) => f.name)],
  );
  for (const f of files) {
    const body = /\bas\s+(\$[a-z_]*\$)([\s\S]*?)\1/i.exec(f.sql)?.[2];
    assert.ok(body, `${f.name}.sql has a dollar-quoted body`);
    assert.deepEqual(
      rows.filter((r) => r.name === f.name).map((r) => r.src),
      [body],
      f.name,
    );
  }
});
