// Schedules: list, create, update, delete (docs/schedules.md).
import type { Command } from 'commander';
import { bool, Cli, type CliIo, many, pairs, seg } from './context.ts';

// biome-ignore lint/suspicious/noExplicitAny: commander's parsed options.
function settings(o: any): Record<string, unknown> {
  const inputs = pairs('input', o.input);
  const enabled = bool('enabled', o.enabled);
  return {
    ...(o.cron !== undefined ? { cron: o.cron } : {}),
    ...(o.timezone !== undefined ? { timezone: o.timezone } : {}),
    ...(o.ref !== undefined ? { ref: o.ref } : {}),
    ...(inputs ? { inputs } : {}),
    ...(o.catchUp !== undefined ? { catch_up: o.catchUp } : {}),
    ...(enabled !== undefined ? { enabled } : {}),
  };
}

function scheduleOptions(cmd: Command): Command {
  return cmd
    .requiredOption('--project <ID>')
    .requiredOption('--name <NAME>')
    .option('--timezone <TZ>', 'an IANA time zone (default UTC)')
    .option('--ref <BRANCH>', "default: the project's default branch")
    .option('--input <NAME=VALUE>', 'a pipeline input (repeatable)', many)
    .option('--catch-up <MODE>', 'latest or none')
    .option('--enabled <BOOL>', 'true or false');
}

/** `schedules`, `schedule create|update|delete`. */
export function registerSchedules(program: Command, io: CliIo): void {
  program
    .command('schedules')
    .description("list a project's schedules")
    .requiredOption('--project <ID>')
    .action(async (o, cmd: Command) => {
      const cli = new Cli(io, cmd);
      const reply = (await cli.call('GET', `/v1/projects/${seg(o.project)}/schedules`)).json;
      cli.print(reply, () => {
        if (reply.schedules.length === 0) return;
        cli.table(
          ['NAME', 'CRON', 'TIMEZONE', 'REF', 'NEXT', 'LAST ERROR'],
          // biome-ignore lint/suspicious/noExplicitAny: the API's schedules.
          reply.schedules.map((s: any) => [
            s.name,
            s.cron,
            s.timezone,
            s.ref ?? '(default branch)',
            s.enabled ? s.next_run_at : 'disabled',
            s.last_error ?? '',
          ]),
        );
      });
    });
  const schedule = program.command('schedule').description('add, change or delete a schedule');
  scheduleOptions(schedule.command('create'))
    .description('add a schedule (cron: 5 fields or @hourly, @daily, @weekly, @monthly)')
    .requiredOption('--cron <CRON>')
    .action(async (o, cmd: Command) => {
      const cli = new Cli(io, cmd);
      const reply = (
        await cli.call('POST', `/v1/projects/${seg(o.project)}/schedules`, {
          name: o.name,
          ...settings(o),
        })
      ).json;
      cli.print(reply, () =>
        io.out(`schedule ${o.name}: next run ${reply.schedule.next_run_at ?? 'none'}`),
      );
    });
  scheduleOptions(schedule.command('update'))
    .description('change the settings given')
    .option('--cron <CRON>')
    .action(async (o, cmd: Command) => {
      const cli = new Cli(io, cmd);
      const reply = (
        await cli.call(
          'PATCH',
          `/v1/projects/${seg(o.project)}/schedules/${seg(o.name)}`,
          settings(o),
        )
      ).json;
      cli.print(reply, () =>
        io.out(
          `schedule ${o.name}: ${reply.schedule.enabled ? `next run ${reply.schedule.next_run_at}` : 'disabled'}`,
        ),
      );
    });
  schedule
    .command('delete')
    .description('delete a schedule (its jobs stay)')
    .requiredOption('--project <ID>')
    .requiredOption('--name <NAME>')
    .action(async (o, cmd: Command) => {
      const cli = new Cli(io, cmd);
      await cli.call('DELETE', `/v1/projects/${seg(o.project)}/schedules/${seg(o.name)}`);
      cli.print({ deleted: o.name }, () => io.out(`deleted schedule ${o.name}`));
    });
}
