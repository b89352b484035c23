import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import {
  createPool,
  prepared,
  SQLSTATE,
  setPreparedStatements,
  sqlState,
  statement,
  statementWithStats,
  TransactionConflictError,
} from '../../lib/db/index.ts';
import { type TestDatabase, testDatabase } from '../helpers/db.ts';

const db: TestDatabase = await testDatabase(import.meta.filename, { migrate: false });
// Fails with 40001 until the sequence passes `until`; nextval is not rolled
// back with the failed statement, so each try moves it on.
await db.pool.query(`
  create sequence tries;
  create table effects (id serial primary key, note text not null);
  create function flaky(until int, note text) returns int language plpgsql as $$
  begin
    insert into effects (note) values (note);
    if nextval('tries') < until then
      raise exception 'simulated conflict' using errcode = '40001';
    end if;
    return 1;
  end $$;
`);
after(() => setPreparedStatements(true));

test('a statement that fails with 40001 runs again and commits once', async () => {
  await db.pool.query(`select setval('tries', 1, false)`);
  const { result, retries } = await statementWithStats<{ v: number }>(db.pool, {
    text: 'select flaky(3, $1) as v',
    values: ['once'],
  });
  assert.equal(result.rows[0]!.v, 1);
  assert.equal(retries, 2);
  const { rows } = await db.pool.query(
    `select count(*)::int as n from effects where note = 'once'`,
  );
  assert.equal(rows[0].n, 1, 'the failed tries rolled back their writes');
});

test('a statement that keeps failing ends in TransactionConflictError with its retries', async () => {
  await db.pool.query(`select setval('tries', 1, false)`);
  await assert.rejects(
    statement(db.pool, { text: 'select flaky(1000, $1)', values: ['never'] }, { maxRetries: 3 }),
    (err: unknown) =>
      err instanceof TransactionConflictError && err.retries === 3 && err.sqlState === '40001',
  );
});

test('any other error is not retried', async () => {
  await db.pool.query(`select setval('tries', 1, false)`);
  await assert.rejects(statement(db.pool, { text: 'select 1/0' }), /division by zero/);
});

test('hot statements are prepared on the connection unless prepared statements are off', async () => {
  const pool = createPool({ url: db.url, max: 1 });
  try {
    const names = async () =>
      (await pool.query<{ name: string }>('select name from pg_prepared_statements')).rows.map(
        (r) => r.name,
      );
    setPreparedStatements(false);
    assert.deepEqual(await statement(pool, prepared('t_off', 'select $1::int as v', [7])), [
      { v: 7 },
    ]);
    assert.deepEqual(await names(), []);
    setPreparedStatements(true);
    assert.deepEqual(await statement(pool, prepared('t_on', 'select $1::int as v', [8])), [
      { v: 8 },
    ]);
    assert.deepEqual(await names(), ['t_on']);
  } finally {
    await pool.end();
  }
});

test('a prepared statement that a migration made stale is run again on a fresh connection, on each connection that holds it', async () => {
  // The claim's shape: a function answering a composite type with a table's
  // row in it, taken apart in the statement (`(c.task).*`); and a plain
  // select of a table's column.
  await db.pool.query(`
    create table stale_t (n integer, s text);
    insert into stale_t values (1, 'one');
    create type stale_wrap as (t stale_t, k integer);
    create function stale_fn() returns setof stale_wrap language plpgsql as $$
      declare v stale_t;
      begin
        select * into v from stale_t limit 1;
        return query select v, 2;
      end $$;
  `);
  const field = prepared('t_field', 'select (c.t).*, c.k from stale_fn() c', []);
  const column = prepared('t_column', 'select s from stale_t', []);
  const cases = [
    // PostgreSQL re-plans neither: the old plan fails at its first row.
    { query: field, code: SQLSTATE.datatypeMismatch, rows: [{ n: 1, s: 'one', k: 2 }] },
    // Re-planned, its result's type changed.
    { query: column, code: SQLSTATE.featureNotSupported, rows: [{ s: 'one' }] },
  ].map((c) => ({ ...c, pool: createPool({ url: db.url, max: 2 }) }));
  try {
    const pids: number[] = [];
    for (const { query, pool } of cases) {
      const held = [await pool.connect(), await pool.connect()];
      for (const client of held) {
        await client.query(query);
        pids.push((await client.query('select pg_backend_pid() as pid')).rows[0].pid);
      }
      for (const client of held) client.release();
    }
    // Another session changes the type they read, as migration 019 did.
    await db.pool.query(`
      create domain stale_text as text check (value <> '');
      alter table stale_t alter column s type stale_text;
    `);
    for (const { query, pool, code, rows } of cases) {
      const client = await pool.connect();
      try {
        await assert.rejects(client.query(query), (err) => sqlState(err) === code);
      } finally {
        client.release();
      }
      for (let i = 0; i < 2; i++) {
        const { result, retries } = await statementWithStats(pool, query);
        assert.deepEqual(result.rows, rows);
        assert.equal(retries, 0, 'a stale plan is not counted as a conflict retry');
      }
    }
    const { rows: alive } = await db.pool.query(
      'select pid from pg_stat_activity where pid = any($1::int[])',
      [pids],
    );
    assert.deepEqual(alive, [], 'the connections that held the stale statements were closed');
  } finally {
    for (const { pool } of cases) await pool.end();
  }
});
