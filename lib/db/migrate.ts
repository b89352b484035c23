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

/**
 * An applied numbered migration whose file is no longer what was applied
 * (Flyway's validate): nothing is migrated and the server does not start
 * until the file is restored, or `npm run migrate -- repair` records it.
 */
export class ChangedMigrationError extends MigrationError {
  constructor(
    readonly file: string,
    readonly recorded: string,
    readonly current: string,
  ) {
    super(
      `migration ${file} was changed after it was applied to this database ` +
        `(recorded checksum ${recorded.slice(0, 12)}…, the file's ${current.slice(0, 12)}…). ` +
        `Applied migrations are never run again: put the file back as it was released, or, ` +
        `when the change is known not to matter to a database that ran the old one ` +
        `(docs/upgrade.md, "A changed migration"), record the file as it is now with ` +
        `the migrator's repair ("npm run migrate -- repair")`,
    );
    this.name = 'ChangedMigrationError';
  }
}

/** A numbered migration's file name, as an operator sees it: `019_check_domains.sql`. */
export function migrationFile(m: Pick<Migration, 'id' | 'name'>): string {
  return `${String(m.id).padStart(3, '0')}_${m.name}.sql`;
}

/**
 * The checksum recorded for a numbered migration: SHA-256 of its text, line
 * endings made \n first (a checkout with CRLF endings is the same file).
 */
export function migrationChecksum(m: Pick<Migration, 'sql'>): string {
  return createHash('sha256').update(m.sql.replace(/\r\n/g, '\n')).digest('hex');
}

/** What the code expects the database to have recorded: each migration's and function's checksum. */
export interface SchemaExpectation {
  migrations: { id: number; name: string; checksum: string }[];
  functions: { name: string; checksum: string }[];
}

/** The expectation of a set of migrations (what /v1/ready compares with). */
export function expectationOf(set: MigrationSet): SchemaExpectation {
  return {
    migrations: set.migrations.map((m) => ({
      id: m.id,
      name: m.name,
      checksum: migrationChecksum(m),
    })),
    functions: set.functions.map((f) => ({ name: f.name, checksum: functionChecksum(f) })),
  };
}

// scripts/bundle.ts replaces this with the expectation read at build time
// (the api function carries no .sql files); unbundled, it is undefined and
// the files of migrations/ are read.
declare const __CONDUCTOR_SCHEMA__: SchemaExpectation | undefined;
let expected: SchemaExpectation | undefined;

/** The schema this code expects (read once). */
export function codeExpectation(): SchemaExpectation {
  expected ??=
    typeof __CONDUCTOR_SCHEMA__ === 'undefined'
      ? expectationOf(loadMigrationSet())
      : __CONDUCTOR_SCHEMA__;
  return expected;
}

/**
 * Whether the database is at the schema `want` describes: every numbered
 * migration applied with the checksum of its file, none the code does not
 * know, every function file at its checksum. Answers what is not, in words.
 */
export async function schemaStatus(
  pool: Pool,
  want: SchemaExpectation = codeExpectation(),
): Promise<{ current: true } | { current: false; reason: string }> {
  const { rows: tables } = await pool.query<{ m: string | null; f: string | null }>(
    `select to_regclass('conductor_migrations')::text as m, to_regclass('conductor_functions')::text as f`,
  );
  if (!tables[0]?.m) return { current: false, reason: 'no migration has been applied' };
  const { rows: columns } = await pool.query(
    `select 1 from information_schema.columns
      where table_name = 'conductor_migrations' and column_name = 'checksum'
        and table_schema = current_schema()`,
  );
  const { rows } = await pool.query<{ id: number; name: string; checksum: string | null }>(
    columns.length
      ? 'select id, name, checksum from conductor_migrations order by id'
      : 'select id, name, null as checksum from conductor_migrations order by id',
  );
  for (const row of rows) {
    const mine = want.migrations[row.id - 1];
    if (!mine)
      return {
        current: false,
        reason: `the database has migration ${row.id}, newer than this code`,
      };
    if (mine.name !== row.name || (row.checksum !== null && row.checksum !== mine.checksum)) {
      return {
        current: false,
        reason: `migration ${migrationFile(mine)} differs from the one applied`,
      };
    }
  }
  if (rows.length < want.migrations.length) {
    const next = want.migrations[rows.length]!;
    return { current: false, reason: `migration ${migrationFile(next)} is not applied` };
  }
  const recorded = new Map<string, string>();
  if (tables[0].f) {
    const { rows: fns } = await pool.query<{ name: string; checksum: string }>(
      'select name, checksum from conductor_functions',
    );
    for (const f of fns) recorded.set(f.name, f.checksum);
  }
  for (const f of want.functions) {
    if (recorded.get(f.name) !== f.checksum) {
      return { current: false, reason: `function file ${f.name}.sql is not applied as it is` };
    }
  }
  return { current: true };
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
        const rows = await appliedMigrations(tx);
        const adopted: Migration[] = [];
        for (const row of rows) {
          const mine = knownAs(known, row);
          const checksum = migrationChecksum(mine);
          if (row.checksum === null) {
            // Applied before checksums were kept (issue #49): what ran then
            // is unknowable, so the file as it is now is adopted, once, and
            // said in the log (docs/upgrade.md, "Checksums").
            await recordChecksum(tx, mine.id, checksum, 'adopted');
            adopted.push(mine);
          } else if (row.checksum !== checksum) {
            throw new ChangedMigrationError(migrationFile(mine), row.checksum, checksum);
          }
        }
        const next = known[rows.length];
        if (next) {
          await tx.query(next.sql);
          await tx.query(
            `insert into conductor_migrations (id, name, checksum, checksum_source)
             values ($1, $2, $3, 'applied')`,
            [next.id, next.name, migrationChecksum(next)],
          );
        }
        const last = !next || next.id === known.length;
        return {
          current: next ? next.id : rows.length,
          migration: next,
          adopted,
          last,
          functions: last ? await applyFunctionFiles(tx, files) : [],
        };
      },
      { isolation: 'read committed', statementTimeoutMs: 0, idleTimeoutMs: 0 },
    );
    for (const m of step.adopted) {
      log(`recorded the checksum of ${migrationFile(m)} (applied before checksums were kept)`);
    }
    if (step.migration) {
      log(`applied migration ${step.migration.id}_${step.migration.name}`);
      applied.push(step.migration);
    }
    for (const name of step.functions) log(`applied function ${name}`);
    functions.push(...step.functions);
    if (step.last) return { applied, functions, current: step.current };
  }
}

/** An applied migration as the bookkeeping table has it; checksum null: applied before #49. */
interface AppliedRow {
  id: number;
  name: string;
  checksum: string | null;
}

/**
 * The migrator's bookkeeping table, made or brought up to date (the checksum
 * columns came with issue #49; an older table gains them empty), and its
 * rows. Called under the migration lock.
 */
async function appliedMigrations(tx: Tx): Promise<AppliedRow[]> {
  await tx.query(`create table if not exists conductor_migrations (
    id integer primary key,
    name text not null,
    applied_at timestamptz not null default now()
  )`);
  // Outside the numbered migrations: the migrator must read this table
  // before it may trust any of them. "if not exists": once added, a no-op
  // that takes no lock beyond the table's own brief one.
  await tx.query(`alter table conductor_migrations
    add column if not exists checksum text,
    add column if not exists checksum_source text,
    add column if not exists checksum_at timestamptz`);
  const { rows } = await tx.query<AppliedRow>(
    'select id, name, checksum from conductor_migrations order by id',
  );
  return rows;
}

/** The code's migration for an applied row: refuses one the code does not know or names otherwise. */
function knownAs(known: Migration[], row: AppliedRow): Migration {
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
  return mine;
}

async function recordChecksum(
  tx: Tx,
  id: number,
  checksum: string,
  source: 'adopted' | 'repaired',
): Promise<void> {
  await tx.query(
    `update conductor_migrations set checksum = $2, checksum_source = $3, checksum_at = now()
      where id = $1`,
    [id, checksum, source],
  );
}

/** What a repair did: each applied migration whose recorded checksum it replaced. */
export interface RepairResult {
  repaired: { file: string; from: string | null; to: string }[];
}

/**
 * `npm run migrate -- repair`: records the checksum of every applied
 * migration whose file changed since (and of those applied before checksums
 * were kept), so the migrator and the server start again. It applies
 * nothing, and runs nothing: a changed file's new text never runs on a
 * database that applied the old one; docs/upgrade.md says when that is
 * harmless. A migration the code does not know, or one whose name differs,
 * is not repairable: the code is not this database's.
 */
export async function repairMigrations(
  pool: Pool,
  set: MigrationSet | Migration[] = loadMigrationSet(),
  log: (line: string) => void = () => {},
): Promise<RepairResult> {
  const known = checkSequence(Array.isArray(set) ? set : set.migrations);
  const repaired = await transaction(
    pool,
    async (tx) => {
      await tx.query('select pg_advisory_xact_lock($1)', [MIGRATION_LOCK.toString()]);
      const out: RepairResult['repaired'] = [];
      for (const row of await appliedMigrations(tx)) {
        const mine = knownAs(known, row);
        const checksum = migrationChecksum(mine);
        if (row.checksum === checksum) continue;
        await recordChecksum(tx, mine.id, checksum, 'repaired');
        out.push({ file: migrationFile(mine), from: row.checksum, to: checksum });
      }
      return out;
    },
    { isolation: 'read committed', statementTimeoutMs: 0, idleTimeoutMs: 0 },
  );
  for (const r of repaired) {
    log(
      `recorded ${r.file} as it is now (checksum ${r.to.slice(0, 12)}…, was ${r.from ? `${r.from.slice(0, 12)}…` : 'not recorded'})`,
    );
  }
  return { repaired };
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
