import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Pool } from './pool.ts';
import { type Tx, transaction } from './transaction.ts';

export interface Migration {
  id: number;
  name: string;
  sql: string;
}

/**
 * A file of migrations/functions/: the one home of an SQL function, holding
 * its current definition (`create or replace function <name>(...)`). Applied
 * after the numbered migrations whenever its checksum differs from the one
 * the database recorded (like Flyway's repeatable migrations).
 */
export interface FunctionFile {
  /** The file's name without `.sql`: the function it defines. */
  name: string;
  sql: string;
}

/** What `npm run migrate` applies: the numbered migrations, then the function files. */
export interface MigrationSet {
  migrations: Migration[];
  functions: FunctionFile[];
}

export interface MigrateResult {
  /** Migrations this call applied, in order. */
  applied: Migration[];
  /** Names of the function files this call applied (new or changed), in name order. */
  functions: string[];
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
export const MIGRATION_LOCK = 0x636e6463746d6967n;

export const FUNCTIONS_DIR = join(MIGRATIONS_DIR, 'functions');

const FILE_NAME = /^(\d{3,})_([a-z0-9_]+)\.sql$/;
const FUNCTION_FILE_NAME = /^([a-z_][a-z0-9_]*)\.sql$/;

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

/**
 * Reads migrations/functions/<name>.sql, each of which must define the
 * function (or procedure) it is named after with `create or replace` (it is applied again
 * whenever it changes). No directory: no function files.
 */
export function loadFunctionFiles(dir: string = FUNCTIONS_DIR): FunctionFile[] {
  if (!existsSync(dir)) return [];
  const files: FunctionFile[] = [];
  for (const file of readdirSync(dir).sort()) {
    if (!file.endsWith('.sql')) continue;
    const match = FUNCTION_FILE_NAME.exec(file);
    if (!match) throw new MigrationError(`function file name "${file}" is not <function_name>.sql`);
    const name = match[1]!;
    const sql = readFileSync(join(dir, file), 'utf8');
    if (
      !new RegExp(`^create\\s+or\\s+replace\\s+(function|procedure)\\s+${name}\\s*\\(`, 'im').test(
        sql,
      )
    ) {
      throw new MigrationError(
        `function file "${file}" must define its function with "create or replace function ${name}(" (or procedure)`,
      );
    }
    files.push({ name, sql });
  }
  return files;
}

/** The numbered migrations of `dir` and the function files of `dir`/functions. */
export function loadMigrationSet(dir: string = MIGRATIONS_DIR): MigrationSet {
  return { migrations: loadMigrations(dir), functions: loadFunctionFiles(join(dir, 'functions')) };
}

/** The checksum recorded for a function file: SHA-256 of its text. */
export function functionChecksum(file: FunctionFile): string {
  return createHash('sha256').update(file.sql).digest('hex');
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
 *
 * Then the function files whose checksum differs from the one recorded in
 * conductor_functions, in the same transaction (and under the same lock) as
 * the last numbered migration, so a new schema and the functions written for
 * it commit together; with no numbered migration pending, in a transaction of
 * their own. A plain list of migrations applies those only (a test stopping
 * at an old schema); the default is both kinds, as read from migrations/.
 */
export async function migrate(
  pool: Pool,
  set: MigrationSet | Migration[] = loadMigrationSet(),
  log: (line: string) => void = () => {},
): Promise<MigrateResult> {
  const known = checkSequence(Array.isArray(set) ? set : set.migrations);
  const files = Array.isArray(set) ? [] : set.functions;
  const applied: Migration[] = [];
  const functions: string[] = [];
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
        if (next) {
          await tx.query(next.sql);
          await tx.query('insert into conductor_migrations (id, name) values ($1, $2)', [
            next.id,
            next.name,
          ]);
        }
        const last = !next || next.id === known.length;
        return {
          current: next ? next.id : rows.length,
          migration: next,
          last,
          functions: last ? await applyFunctionFiles(tx, files) : [],
        };
      },
      { isolation: 'read committed', statementTimeoutMs: 0, idleTimeoutMs: 0 },
    );
    if (step.migration) {
      log(`applied migration ${step.migration.id}_${step.migration.name}`);
      applied.push(step.migration);
    }
    for (const name of step.functions) log(`applied function ${name}`);
    functions.push(...step.functions);
    if (step.last) return { applied, functions, current: step.current };
  }
}

/**
 * Applies, in name order, the function files whose checksum is not the one
 * recorded, and records the new one. Called under the migration lock.
 */
async function applyFunctionFiles(tx: Tx, files: FunctionFile[]): Promise<string[]> {
  await tx.query(`create table if not exists conductor_functions (
    name text primary key,
    checksum text not null,
    applied_at timestamptz not null default now()
  )`);
  const { rows } = await tx.query<{ name: string; checksum: string }>(
    'select name, checksum from conductor_functions',
  );
  const recorded = new Map(rows.map((r) => [r.name, r.checksum]));
  const applied: string[] = [];
  for (const file of [...files].sort((a, b) => (a.name < b.name ? -1 : 1))) {
    const checksum = functionChecksum(file);
    if (recorded.get(file.name) === checksum) continue;
    try {
      await tx.query(file.sql);
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      throw new MigrationError(`function file ${file.name}.sql: ${message}`, { cause: err });
    }
    await tx.query(
      `insert into conductor_functions (name, checksum) values ($1, $2)
       on conflict (name) do update set checksum = excluded.checksum, applied_at = now()`,
      [file.name, checksum],
    );
    applied.push(file.name);
  }
  return applied;
}
