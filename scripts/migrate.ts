// npm run migrate [-- repair]: what `conductor migrate [repair]` does
// (local/migrate.ts): applies the migrations (numbered, then the changed
// files of migrations/functions) to DATABASE_URL, or to the embedded server
// kept under CONDUCTOR_DATA_DIR; `repair` records the checksum of each
// applied migration whose file changed since, running none of its SQL.
import { parseArgs } from 'node:util';
import { runMigrate } from '../local/migrate.ts';

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

try {
  await runMigrate(
    { repair: command === 'repair', env: process.env, again: 'npm run migrate' },
    (line) => console.log(line),
  );
} catch (err) {
  console.error(err instanceof Error ? err.message : err);
  process.exitCode = 1;
}
