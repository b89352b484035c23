import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Pool } from './pool.ts';
import { transaction } from './transaction.ts';

export interface Migration {
  id: number;
  name: string;
  sql: string;
}

export interface MigrateResult {
  /** Migrations this call applied, in order. */
  applied: Migration[];
  /** The highest migration the database has now. */
  current: number;
}

/** Raised when the database and the code disagree about the schema's history. */
export class MigrationError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'MigrationError';
  }
}

export const MIGRATIONS_DIR = fileURLToPath(new URL('../../migrations/', import.meta.url));

// Any constant will do as long as nothing else in the database uses it; it
// spells "cndctmig" so it is recognisable in pg_locks.
const MIGRATION_LOCK = 0x636e6463746d6967n;

const FILE_NAME = /^(\d{3,})_([a-z0-9_]+)\.sql$/;

/** Reads `NNN_name.sql` files, checking they are numbered 1, 2, 3… without gaps. */
export function loadMigrations(dir: string = MIGRATIONS_DIR): Migration[] {
  const migrations: Migration[] = [];
  for (const file of readdirSync(dir).sort()) {
    if (!file.endsWith('.sql')) continue;
    const match = FILE_NAME.exec(file);
    if (!match) throw new MigrationError(`migration file name "${file}" is not NNN_name.sql`);
    migrations.push({
      id: Number(match[1]),
      name: match[2]!,
      sql: readFileSync(`${dir}/${file}`, 'utf8'),
    });
  }
  return checkSequence(migrations);
}

function checkSequence(migrations: Migration[]): Migration[] {
  const sorted = [...migrations].sort((a, b) => a.id - b.id);
  sorted.forEach((m, i) => {
    if (m.id !== i + 1) {
      throw new MigrationError(
        `migrations must be numbered 1, 2, 3… without gaps; found ${m.id} at position ${i + 1}`,
      );
    }
  });
  return sorted;
}

/**
 * Applies the migrations the database lacks, each in its own transaction under
 * a transaction-level advisory lock, so concurrent deploys apply each one once.
 * Refuses to run when the database has migrations this code does not know.
 */
export async function migrate(
  pool: Pool,
  migrations: Migration[] = loadMigrations(),
  log: (line: string) => void = () => {},
): Promise<MigrateResult> {
  const known = checkSequence(migrations);
  const applied: Migration[] = [];
  for (;;) {
    // One migration per transaction: a failing one rolls back whole and leaves
    // the ones before it recorded. READ COMMITTED because DDL under a snapshot
    // gains nothing, and the advisory lock already serialises migrators.
    const step = await transaction(
      pool,
      async (tx) => {
        // Transaction-scoped lock: a session lock would pin the connection
        // behind RDS Proxy and outlive a crashed migrator's transaction.
        await tx.query('select pg_advisory_xact_lock($1)', [MIGRATION_LOCK.toString()]);
        await tx.query(`create table if not exists conductor_migrations (
          id integer primary key,
          name text not null,
          applied_at timestamptz not null default now()
        )`);
        const { rows } = await tx.query<{ id: number; name: string }>(
          'select id, name from conductor_migrations order by id',
        );
        for (const row of rows) {
          const mine = known[row.id - 1];
          if (!mine) {
            throw new MigrationError(
              `the database has migration ${row.id} (${row.name}) but this code knows only up to ${known.length}; deploy the newer code`,
            );
          }
          if (mine.name !== row.name) {
            throw new MigrationError(
              `migration ${row.id} is "${row.name}" in the database but "${mine.name}" in the code`,
            );
          }
        }
        const next = known[rows.length];
        if (!next) return { current: rows.length, migration: undefined };
        await tx.query(next.sql);
        await tx.query('insert into conductor_migrations (id, name) values ($1, $2)', [
          next.id,
          next.name,
        ]);
        return { current: next.id, migration: next };
      },
      { isolation: 'read committed', statementTimeoutMs: 0, idleTimeoutMs: 0 },
    );
    if (!step.migration) return { applied, current: step.current };
    log(`applied migration ${step.migration.id}_${step.migration.name}`);
    applied.push(step.migration);
  }
}
