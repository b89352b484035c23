// npm run migrate [-- repair]: applies the migrations (numbered, then the
// changed files of migrations/functions) to DATABASE_URL, or, when it is
// unset, to the embedded server kept under CONDUCTOR_DATA_DIR (started for the
// purpose, then stopped). `repair` applies nothing: it records the checksum
// of each applied migration whose file changed since (lib/db/migrate.ts,
// repairMigrations; docs/upgrade.md says when that is safe).
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { loadConfig } from '../lib/config.ts';
import { createPool, migrate, repairMigrations } from '../lib/db/index.ts';
import { startEmbeddedPostgres } from '../local/postgres.ts';

const USAGE = `usage: npm run migrate [-- repair]
  (nothing)  apply the migrations the database lacks
  repair     record the checksum of each applied migration whose file changed since it was
             applied; runs no SQL of theirs (docs/upgrade.md, "A changed migration")`;

let command: string | undefined;
try {
  const { positionals, values } = parseArgs({
    options: { help: { type: 'boolean', short: 'h' } },
    allowPositionals: true,
    strict: true,
  });
  if (values.help) {
    console.log(USAGE);
    process.exit(0);
  }
  if (positionals.length > 1 || (positionals[0] !== undefined && positionals[0] !== 'repair')) {
    throw new Error(`unknown command "${positionals.join(' ')}"`);
  }
  command = positionals[0];
} catch (err) {
  console.error(`${err instanceof Error ? err.message : err}\n${USAGE}`);
  process.exit(2);
}

const config = loadConfig();
let url = config.DATABASE_URL;
let stop = async () => {};
if (!url) {
  const dataDir = resolve(join(config.CONDUCTOR_DATA_DIR, 'pg'));
  const server = await startEmbeddedPostgres({ dataDir });
  console.log(`embedded PostgreSQL in ${dataDir} on port ${server.port}`);
  const exists = await (async () => {
    const pool = createPool({ url: server.url(), max: 1 });
    try {
      const { rows } = await pool.query("select 1 from pg_database where datname = 'conductor'");
      return rows.length > 0;
    } finally {
      await pool.end();
    }
  })();
  if (!exists) await server.createDatabase('conductor');
  url = server.url('conductor');
  stop = () => server.stop();
}

const pool = createPool({ url, max: 1 });
try {
  if (command === 'repair') {
    const { repaired } = await repairMigrations(pool, undefined, (line) => console.log(line));
    console.log(
      repaired.length
        ? `repaired ${repaired.length} migration(s); "npm run migrate" or the server's start goes on from here`
        : 'every applied migration matches its file: nothing to repair',
    );
  } else {
    const result = await migrate(pool, undefined, (line) => console.log(line));
    console.log(
      result.applied.length || result.functions.length
        ? `database is at migration ${result.current}, functions as in migrations/functions`
        : `database is up to date (migration ${result.current})`,
    );
  }
} catch (err) {
  console.error(err instanceof Error ? err.message : err);
  process.exitCode = 1;
} finally {
  await pool.end();
  await stop();
}
