// The `conductor` command (and `npm run ctl`): one program of commander, its
// commands in one file per group (docs/architecture.md), each a thin client
// of the HTTP API; `validate` and `schema` need no server.
import { Command, CommanderError } from 'commander';
import { VERSION } from '../lib/version.ts';
import { registerArtifacts } from './artifacts.ts';
import { CliError, type CliIo } from './context.ts';
import { registerJobs } from './jobs.ts';
import { registerMigrate } from './migrate.ts';
import { registerNotifications } from './notifications.ts';
import { registerPipeline } from './pipeline.ts';
import { registerPools } from './pools.ts';
import { registerProjects } from './projects.ts';
import { registerSchedules } from './schedules.ts';
import { registerSecrets } from './secrets.ts';
import { registerServer } from './server.ts';
import { registerWorkers } from './workers.ts';

/** Adds a group's commands to the program. */
export type Register = (program: Command, io: CliIo) => void;

/** The program, writing through `io` (tests read what a person would see). */
export function buildProgram(io: CliIo): Command {
  const program = new Command(io.name ?? 'conductor');
  program
    .description(
      'Conductor: a CI control plane on PostgreSQL. Every command but validate, schema, server and migrate talks to its HTTP API.',
    )
    .version(VERSION, '-V, --version', 'print the version')
    .option('--url <URL>', 'the control plane (default $CONDUCTOR_URL, else http://127.0.0.1:8080)')
    .option('--token-file <PATH>', 'the admin token, from a file')
    .option(
      '--token <TOKEN>',
      'the admin token (default $CONDUCTOR_ADMIN_TOKEN, else .conductor/admin-token, which npm start and conductor server keep)',
    )
    .option('--json', 'print one JSON document: the API answer, for scripts and jq')
    .showSuggestionAfterError(true)
    .showHelpAfterError(false)
    .exitOverride()
    .configureOutput({
      writeOut: (s) => io.out(s.replace(/\n$/, '')),
      writeErr: (s) => io.out(s.replace(/\n$/, '')),
    });
  for (const register of [
    registerProjects,
    registerWorkers,
    registerPools,
    registerSecrets,
    registerJobs,
    registerSchedules,
    registerNotifications,
    registerArtifacts,
    registerPipeline,
    registerServer,
    registerMigrate,
  ]) {
    register(program, io);
  }
  // Every command inherits the output and the exit override.
  const inherit = (cmd: Command) => {
    for (const sub of cmd.commands) {
      sub.copyInheritedSettings(cmd);
      inherit(sub);
    }
  };
  inherit(program);
  return program;
}

/** Runs one command line; answers the exit code (0, 1 for a failure, 2 for a command used wrongly). */
export async function runCli(argv: string[], io: CliIo): Promise<number> {
  const program = buildProgram(io);
  try {
    await program.parseAsync(argv, { from: 'user' });
    return 0;
  } catch (err) {
    if (err instanceof CommanderError) {
      // Help and --version asked for are answers; anything else a usage error, already printed.
      return err.exitCode === 0 ? 0 : 2;
    }
    if (err instanceof CliError) {
      // An empty message: the command printed its own account (validate's problems).
      if (err.message) io.out(err.message);
      return err.exitCode;
    }
    io.out(err instanceof Error ? err.message : String(err));
    return 1;
  }
}
