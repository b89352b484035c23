// `conductor migrate [repair]`: what `npm run migrate [-- repair]` does
// (local/migrate.ts): applies the migrations to DATABASE_URL (the embedded
// PostgreSQL under CONDUCTOR_DATA_DIR when it is unset); `repair` records the
// checksum of each applied migration whose file changed since it was
// applied, running none of its SQL (docs/upgrade.md, "A changed migration").
import type { Command } from 'commander';
import { CliError, type CliIo } from './context.ts';

async function run(io: CliIo, repair: boolean): Promise<void> {
  const { runMigrate } = await import('../local/migrate.ts');
  try {
    await runMigrate({ repair, env: { ...io.env }, again: 'conductor migrate' }, io.out);
  } catch (err) {
    throw new CliError(err instanceof Error ? err.message : String(err), 1);
  }
}

/** `migrate`, `migrate repair`. */
export function registerMigrate(program: Command, io: CliIo): void {
  const migrate = program
    .command('migrate')
    .description(
      'apply the migrations the database lacks (DATABASE_URL, else the embedded PostgreSQL)',
    )
    .action(() => run(io, false));
  migrate
    .command('repair')
    .description(
      'record the checksum of each applied migration whose file changed since; runs none of its SQL',
    )
    .action(() => run(io, true));
}
