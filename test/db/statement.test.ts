import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import {
  createPool,
  prepared,
  setPreparedStatements,
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
