import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  createPool,
  type Pool,
  SQLSTATE,
  sqlState,
  TransactionConflictError,
  transaction,
  transactionWithStats,
} from '../../lib/db/index.ts';
import { ConflictError } from '../../lib/errors.ts';
import { type TestDatabase, testDatabase } from '../helpers/db.ts';
import { barrier } from '../helpers/fixtures.ts';

const db: TestDatabase = await testDatabase(import.meta.filename, { migrate: false });
await db.pool.query(`
  create table counter (id int primary key, n int not null);
  create table effects (id serial primary key, note text not null);
`);

async function resetCounter(): Promise<void> {
  await db.pool.query('truncate counter, effects');
  await db.pool.query('insert into counter values (1, 0)');
}

/** Commits an increment on its own connection, outside the helper. */
async function bumpElsewhere(): Promise<void> {
  await db.pool.query('update counter set n = n + 1 where id = 1');
}

test('a transaction that loses a race on a row hits 40001 and is retried to success, committing once', async () => {
  await resetCounter();
  let runs = 0;
  const seen: string[] = [];
  const result = await transactionWithStats(
    db.pool,
    async (tx) => {
      runs++;
      // The first read fixes the snapshot.
      const { rows } = await tx.query<{ n: number }>('select n from counter where id = 1');
      if (runs === 1) await bumpElsewhere(); // a concurrent writer commits after our snapshot
      await tx.query("insert into effects (note) values ('from the helper')");
      await tx.query('update counter set n = $1 where id = 1', [rows[0]!.n + 1]);
      return rows[0]!.n;
    },
    { onRetry: (err) => seen.push(sqlState(err) ?? 'none') },
  );
  assert.equal(runs, 2, 'the function ran again after the conflict');
  assert.equal(result.retries, 1);
  assert.deepEqual(seen, [SQLSTATE.serializationFailure]);
  assert.equal(result.value, 1, 'the retry read the concurrent commit');
  const { rows } = await db.pool.query('select n from counter where id = 1');
  assert.equal(rows[0].n, 2, 'both increments are kept; none was lost');
  const effects = await db.pool.query('select count(*)::int as c from effects');
  assert.equal(effects.rows[0].c, 1, 'the rolled-back first run left nothing behind');
});

test('sixteen concurrent read-modify-write transactions lose no update', async () => {
  await resetCounter();
  const pool = createPool({ url: db.url, max: 16 });
  // Every first run reads before any writes, so they overlap by construction:
  // the first update to commit makes each of the other 15 fail and retry.
  const allRead = barrier(16);
  try {
    const results = await Promise.all(
      Array.from({ length: 16 }, () => {
        let runs = 0;
        return transactionWithStats(
          pool,
          async (tx) => {
            const { rows } = await tx.query<{ n: number }>('select n from counter where id = 1');
            if (runs++ === 0) await allRead();
            await tx.query('update counter set n = $1 where id = 1', [rows[0]!.n + 1]);
          },
          { maxRetries: 100 },
        );
      }),
    );
    const { rows } = await pool.query('select n from counter where id = 1');
    assert.equal(rows[0].n, 16);
    const retries = results.reduce((s, r) => s + r.retries, 0);
    assert.ok(retries >= 15, `every transaction that read a stale counter retried: ${retries}`);
  } finally {
    await pool.end();
  }
});

test('a deadlock (40P01) is retried and both transactions commit', async () => {
  await db.pool.query('truncate counter');
  await db.pool.query('insert into counter values (1, 0), (2, 0)');
  const pool = createPool({ url: db.url, max: 4 });
  let retries = 0;
  let ready = 0;
  const bothLocked = () =>
    new Promise<void>((resolve) => {
      ready++;
      const check = () => (ready >= 2 ? resolve() : setTimeout(check, 2));
      check();
    });
  const lockInOrder = (first: number, second: number) =>
    transactionWithStats(
      pool,
      async (tx) => {
        await tx.query('update counter set n = n + 1 where id = $1', [first]);
        if (ready < 2) await bothLocked(); // only the first run waits, so the retry goes through
        await tx.query('update counter set n = n + 1 where id = $1', [second]);
      },
      // Read committed: the retried side blocks on the lock instead of raising 40001.
      {
        isolation: 'read committed',
        onRetry: (err) => {
          assert.equal(sqlState(err), SQLSTATE.deadlockDetected);
          retries++;
        },
      },
    );
  try {
    await Promise.all([lockInOrder(1, 2), lockInOrder(2, 1)]);
    assert.equal(retries, 1, 'exactly one side was chosen as the deadlock victim');
    const { rows } = await pool.query('select id, n from counter order by id');
    assert.deepEqual(rows, [
      { id: 1, n: 2 },
      { id: 2, n: 2 },
    ]);
  } finally {
    await pool.end();
  }
});

test('errors other than serialization failures and deadlocks are not retried', async () => {
  await resetCounter();
  let runs = 0;
  await assert.rejects(
    transaction(db.pool, async (tx) => {
      runs++;
      await tx.query('insert into counter values (1, 0)');
    }),
    (err) => sqlState(err) === SQLSTATE.uniqueViolation,
  );
  assert.equal(runs, 1);

  runs = 0;
  await assert.rejects(
    transaction(db.pool, async () => {
      runs++;
      throw new Error('not a database error');
    }),
    /not a database error/,
  );
  assert.equal(runs, 1);
});

test('a transaction that keeps conflicting ends in a typed conflict error after its retries', async () => {
  await resetCounter();
  let runs = 0;
  const err = await transaction(
    db.pool,
    async (tx) => {
      runs++;
      await tx.query('select n from counter where id = 1');
      await bumpElsewhere();
      await tx.query('update counter set n = n + 1 where id = 1');
    },
    { maxRetries: 2, immediate: true },
  ).then(
    () => assert.fail('expected a conflict'),
    (e: unknown) => e,
  );
  assert.ok(err instanceof TransactionConflictError);
  assert.ok(!(err instanceof ConflictError), 'not a 409: on runner routes that means a lost lease');
  assert.equal(err.status, 503, 'unavailable: the client sends it again');
  assert.equal(err.code, 'unavailable');
  assert.equal(err.expose, true);
  assert.equal(err.retries, 2);
  assert.equal(err.sqlState, SQLSTATE.serializationFailure);
  assert.equal(runs, 3, 'one try and two retries');
  const { rows } = await db.pool.query('select n from counter where id = 1');
  assert.equal(rows[0].n, 3, 'only the concurrent increments committed');
});

test('the isolation level is REPEATABLE READ unless asked otherwise', async () => {
  const level = (pool: Pool, opts = {}) =>
    transaction(
      pool,
      async (tx) => (await tx.query('show transaction_isolation')).rows[0].transaction_isolation,
      opts,
    );
  assert.equal(await level(db.pool), 'repeatable read');
  assert.equal(await level(db.pool, { isolation: 'read committed' }), 'read committed');
  assert.equal(await level(db.pool, { isolation: 'serializable' }), 'serializable');
});

test('a DATABASE_URL with its own ?options= keeps them and still runs at REPEATABLE READ', async () => {
  const url = new URL(db.url);
  url.searchParams.set(
    'options',
    '-c search_path=pg_catalog,public -c default_transaction_isolation=read\\ committed',
  );
  const pool = createPool({ url: url.toString(), max: 1 });
  try {
    const { rows } = await pool.query(
      `select current_setting('transaction_isolation') as iso, current_setting('search_path') as path`,
    );
    // The URL's search_path holds; the isolation is ours whatever the URL says
    // (before, node-postgres dropped the pool's options for the URL's).
    assert.deepEqual(rows[0], { iso: 'repeatable read', path: 'pg_catalog,public' });
  } finally {
    await pool.end();
  }
});

test('timeouts are set per transaction and never left on the connection', async () => {
  const pool = createPool({ url: db.url, max: 1 });
  try {
    const inside = await transaction(
      pool,
      async (tx) => {
        const st = await tx.query('show statement_timeout');
        const idle = await tx.query('show idle_in_transaction_session_timeout');
        return [st.rows[0].statement_timeout, idle.rows[0].idle_in_transaction_session_timeout];
      },
      { statementTimeoutMs: 1500, idleTimeoutMs: 2500 },
    );
    assert.deepEqual(inside, ['1500ms', '2500ms']);
    // The pool has one connection, so this runs on the same session.
    const after = await pool.query('show statement_timeout');
    assert.equal(
      after.rows[0].statement_timeout,
      '8s',
      "SET LOCAL ended with the transaction: the session's own bound is back",
    );
  } finally {
    await pool.end();
  }
});

test('a statement over the timeout is cancelled and not retried', async () => {
  let runs = 0;
  await assert.rejects(
    transaction(
      db.pool,
      async (tx) => {
        runs++;
        await tx.query('select pg_sleep(2)');
      },
      { statementTimeoutMs: 100 },
    ),
    (err) => sqlState(err) === SQLSTATE.queryCanceled,
  );
  assert.equal(runs, 1);
});

test('a rolled-back transaction leaves the pooled connection usable', async () => {
  const pool = createPool({ url: db.url, max: 1 });
  try {
    await assert.rejects(transaction(pool, async (tx) => tx.query('select 1/0')));
    assert.equal(
      await transaction(pool, async (tx) => (await tx.query('select 2 as v')).rows[0].v),
      2,
    );
  } finally {
    await pool.end();
  }
});
