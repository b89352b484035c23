// Secrets: set one (its value never on the command line), list names, delete one.
import { type Command, Option } from 'commander';
import { Cli, type CliIo, readValue, refuseOnTheLine, seg } from './context.ts';

/** `secrets`, `secret set|delete`. */
export function registerSecrets(program: Command, io: CliIo): void {
  program
    .command('secrets')
    .description("list a project's secret names")
    .requiredOption('--project <ID>')
    .action(async (o, cmd: Command) => {
      const cli = new Cli(io, cmd);
      const reply = (await cli.call('GET', `/v1/projects/${seg(o.project)}/secrets`)).json;
      cli.print(reply, () =>
        cli.table(
          ['NAME', 'UPDATED'],
          // biome-ignore lint/suspicious/noExplicitAny: the API's secrets.
          reply.secrets.map((s: any) => [s.name, s.updated_at ?? s.created_at ?? '']),
        ),
      );
    });
  const secret = program.command('secret').description('set or delete a secret');
  secret
    .command('set')
    .description(
      'set a secret to what standard input holds (a terminal asks without echo) or --file PATH holds',
    )
    .requiredOption('--project <ID>')
    .requiredOption('--name <NAME>')
    .option('--file <PATH>', 'read the value from this file')
    .addOption(new Option('--value <VALUE>').hideHelp())
    .action(async (o, cmd: Command) => {
      refuseOnTheLine(
        io,
        'value',
        o.value,
        'Pipe the value in (printf %s "$VALUE" | CLI secret set ...), type it when asked, or give --file PATH',
      );
      const cli = new Cli(io, cmd);
      // A missing admin token is said before anyone types the value.
      cli.token();
      const value = await readValue(io, `the value of ${o.name}`, o.file);
      const set = await cli.call('PUT', `/v1/projects/${seg(o.project)}/secrets/${seg(o.name)}`, {
        value,
      });
      const warning = set.headers.get('x-conductor-warning');
      cli.print({ ...(set.json ?? {}), ...(warning ? { warning } : {}) }, () => {
        io.out(`secret ${o.name} set for ${o.project}`);
        if (warning) io.out(`warning: ${warning}`);
      });
    });
  secret
    .command('delete')
    .description('delete a secret')
    .requiredOption('--project <ID>')
    .requiredOption('--name <NAME>')
    .action(async (o, cmd: Command) => {
      const cli = new Cli(io, cmd);
      await cli.call('DELETE', `/v1/projects/${seg(o.project)}/secrets/${seg(o.name)}`);
      cli.print({ deleted: o.name, project: o.project }, () =>
        io.out(`secret ${o.name} deleted from ${o.project}`),
      );
    });
}
