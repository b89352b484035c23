// Each test file gets its own database on the run's server, so files can run in
// parallel. A file's database is dropped when all of its tests passed and kept
// otherwise, so a failure can be inspected (its name is printed).
import { randomBytes } from 'node:crypto';
import { basename } from 'node:path';
import { after, afterEach } from 'node:test';
import { createPool, migrate, type Pool } from '../../lib/db/index.ts';
import { adminQuery, createDatabase, dropDatabase, withDatabase } from '../../local/postgres.ts';

export interface TestDatabase {
  name: string;
  url: string;
  pool: Pool;
}

/** The server the run uses: the test script's embedded one, or DATABASE_URL's. */
export function adminUrl(): string {
  const url = process.env.CONDUCTOR_TEST_ADMIN_URL ?? process.env.DATABASE_URL;
  if (!url) {
    throw new Error('no database server: run through `npm test` or set DATABASE_URL');
  }
  return url;
}

/**
 * Creates a fresh database for the calling test file, optionally migrated, and
 * registers its clean-up. Await it at the top level of the file: hooks registered inside `before` would run too early.
 */
export async function testDatabase(
  file: string,
  opts: { migrate?: boolean; poolMax?: number } = {},
): Promise<TestDatabase> {
  // The test script names the prefix after DATABASE_URL's database (CI's own,
  // dropped with everything under its prefix afterwards); names stay within
  // 60 characters, under PostgreSQL's 63, so a file can add a suffix.
  const prefix = process.env.CONDUCTOR_TEST_DB_PREFIX ?? 't_';
  const stem = basename(file)
    .replace(/\.test\.ts$/, '')
    .replace(/[^a-z0-9]+/gi, '_')
    .toLowerCase()
    .slice(0, Math.min(30, 60 - prefix.length - 9));
  const name = `${prefix}${stem}_${randomBytes(4).toString('hex')}`;
  const server = adminUrl();
  await createDatabase(server, name);
  // The code sets the isolation it needs; running the suite with the
  // database's default set otherwise (read committed, repeatable read,
  // serializable) checks that nothing depends on the server's default.
  const isolation = process.env.CONDUCTOR_TEST_DEFAULT_ISOLATION;
  if (isolation) {
    if (!/^(read committed|repeatable read|serializable)$/.test(isolation)) {
      throw new Error(`CONDUCTOR_TEST_DEFAULT_ISOLATION: unknown level "${isolation}"`);
    }
    await adminQuery(
      withDatabase(server, 'postgres'),
      `alter database "${name}" set default_transaction_isolation = '${isolation}'`,
    );
  }
  const url = withDatabase(server, name);
  const pool = createPool({ url, max: opts.poolMax ?? 20 });
  if (opts.migrate ?? true) await migrate(pool);

  let failed = false;
  afterEach((t) => {
    // `passed` exists on Node 20.20 but is missing from its type definitions.
    if ((t as { passed?: boolean }).passed === false) failed = true;
  });
  after(async () => {
    await pool.end();
    if (failed) {
      console.error(`# kept database ${name} for inspection`);
    } else {
      await dropDatabase(server, name);
    }
  });
  return { name, url, pool };
}

/** Sequential scans of each of `tables` so far, as the server's statistics hold them. */
async function seqScans(pool: Pool, tables: string[]): Promise<Record<string, number>> {
  const { rows } = await pool.query<{ relname: string; seq_scan: number }>(
    'select relname, seq_scan from pg_stat_user_tables where relname = any ($1)',
    [tables],
  );
  return Object.fromEntries(rows.map((r) => [r.relname, r.seq_scan]));
}

/**
 * The tables of `tables` that `work` scanned sequentially, as "table: n".
 * A backend's counters reach the server when it goes idle after
 * `select pg_stat_force_next_flush()` (PostgreSQL 15 on), before its reply:
 * it is called on each of `pools` (each of one connection, so that it
 * reaches the backend that did the work) before and after, and the counters
 * are read through the first.
 */
export async function scansDuring(
  pools: Pool[],
  tables: string[],
  work: () => Promise<void>,
): Promise<string[]> {
  const flush = () => Promise.all(pools.map((p) => p.query('select pg_stat_force_next_flush()')));
  await flush();
  const before = await seqScans(pools[0]!, tables);
  await work();
  await flush();
  const after = await seqScans(pools[0]!, tables);
  return tables
    .filter((t) => (after[t] ?? 0) !== (before[t] ?? 0))
    .map((t) => `${t}: ${(after[t] ?? 0) - (before[t] ?? 0)}`);
}
