// Applies the migrations (numbered, then the changed files of
// migrations/functions) to DATABASE_URL, or, when it is unset, to the embedded
// server kept under CONDUCTOR_DATA_DIR (started for the purpose, then stopped).
import { join, resolve } from 'node:path';
import { loadConfig } from '../lib/config.ts';
import { createPool, migrate } from '../lib/db/index.ts';
import { startEmbeddedPostgres } from '../local/postgres.ts';

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
  const result = await migrate(pool, undefined, (line) => console.log(line));
  console.log(
    result.applied.length || result.functions.length
      ? `database is at migration ${result.current}, functions as in migrations/functions`
      : `database is up to date (migration ${result.current})`,
  );
} catch (err) {
  console.error(err instanceof Error ? err.message : err);
  process.exitCode = 1;
} finally {
  await pool.end();
  await stop();
}
