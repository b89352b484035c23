// Applying the migrations without the server, for `conductor migrate [repair]`
// (cli/migrate.ts) and `npm run migrate [-- repair]` (scripts/migrate.ts): to
// DATABASE_URL, or, when it is unset, to the embedded server kept under
// CONDUCTOR_DATA_DIR (started for the purpose, then stopped). `repair` applies
// nothing: it records the checksum of each applied migration whose file
// changed since (lib/db/migrate.ts, repairMigrations; docs/upgrade.md says
// when that is safe).
import { join, resolve } from 'node:path';
import { loadConfig } from '../lib/config.ts';
import { createPool, migrate, repairMigrations } from '../lib/db/index.ts';
import { startEmbeddedPostgres } from './postgres.ts';

/** Migrates (or repairs) the database `env` names; throws what stopped it. */
export async function runMigrate(
  opts: { repair: boolean; env: NodeJS.ProcessEnv; again: string },
  out: (line: string) => void,
): Promise<void> {
  const config = loadConfig(opts.env);
  let url = config.DATABASE_URL;
  let stop = async () => {};
  if (!url) {
    const dataDir = resolve(join(config.CONDUCTOR_DATA_DIR, 'pg'));
    const server = await startEmbeddedPostgres({ dataDir });
    out(`embedded PostgreSQL in ${dataDir} on port ${server.port}`);
    try {
      const admin = createPool({ url: server.url(), max: 1 });
      const exists = await admin
        .query("select 1 from pg_database where datname = 'conductor'")
        .then(({ rows }) => rows.length > 0)
        .finally(() => admin.end());
      if (!exists) await server.createDatabase('conductor');
    } catch (err) {
      await server.stop();
      throw err;
    }
    url = server.url('conductor');
    stop = () => server.stop();
  }
  const pool = createPool({ url, max: 1 });
  try {
    if (opts.repair) {
      const { repaired } = await repairMigrations(pool, undefined, out);
      out(
        repaired.length
          ? `repaired ${repaired.length} migration(s); "${opts.again}" or the server's start goes on from here`
          : 'every applied migration matches its file: nothing to repair',
      );
    } else {
      const result = await migrate(pool, undefined, out);
      out(
        result.applied.length || result.functions.length
          ? `database is at migration ${result.current}, functions as in migrations/functions`
          : `database is up to date (migration ${result.current})`,
      );
    }
  } finally {
    await pool.end();
    await stop();
  }
}
