// Notifications: list, create, delete (docs/api.md, "Notifications").
import type { Command } from 'commander';
import { Cli, CliError, type CliIo, readKept, seg } from './context.ts';

const split = (list: string) =>
  list
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);

// biome-ignore lint/suspicious/noExplicitAny: the API's notifications.
function row(n: any): string[] {
  return [
    n.id,
    n.kind,
    n.kind === 'email' ? n.to.join(',') : n.url_host,
    n.on.join(','),
    n.branches ? n.branches.join(',') : '(all)',
  ];
}
const HEADERS = ['ID', 'KIND', 'TO', 'ON', 'BRANCHES'];

/** `notifications`, `notification create|list|delete`. */
export function registerNotifications(program: Command, io: CliIo): void {
  const list = async (o: { project: string }, cmd: Command) => {
    const cli = new Cli(io, cmd);
    const reply = (await cli.call('GET', `/v1/projects/${seg(o.project)}/notifications`)).json;
    cli.print(reply, () => {
      if (reply.notifications.length > 0) cli.table(HEADERS, reply.notifications.map(row));
    });
  };
  program
    .command('notifications')
    .description("list a project's notifications")
    .requiredOption('--project <ID>')
    .action(list);
  const notification = program
    .command('notification')
    .description('add, list or delete a notification (webhook, Slack, email) of finished jobs');
  notification
    .command('create')
    .description("add a notification; a webhook's signing secret is shown once")
    .requiredOption('--project <ID>')
    .requiredOption('--kind <KIND>', 'webhook, slack or email')
    .option('--url-file <PATH>', 'the webhook or Slack URL, from a file (it is a secret)')
    .option('--url <URL>', 'the webhook or Slack URL (shows in shell history: prefer --url-file)')
    .option('--to <a@x,b@y>', 'email: the addresses')
    .option('--on <EVENTS>', 'failed, fixed, always (comma-separated)', 'failed,fixed')
    .option('--branches <PATTERNS>', 'only jobs on these branches (main,release/*)')
    .action(async (o, cmd: Command) => {
      const cli = new Cli(io, cmd);
      if (o.url && o.urlFile) throw new CliError('give --url or --url-file, not both', 2);
      const url = o.urlFile ? readKept(o.urlFile, cli.cwd) : o.url;
      const created = (
        await cli.call('POST', `/v1/projects/${seg(o.project)}/notifications`, {
          kind: o.kind,
          ...(url ? { url } : {}),
          ...(o.to ? { to: split(o.to) } : {}),
          on: split(o.on),
          ...(o.branches ? { branches: split(o.branches) } : {}),
        })
      ).json;
      cli.print(created, () => {
        cli.table(HEADERS, [row(created.notification)]);
        if (created.secret) io.out(`webhook signing secret (shown once): ${created.secret}`);
      });
    });
  notification
    .command('list')
    .description("list a project's notifications")
    .requiredOption('--project <ID>')
    .action(list);
  notification
    .command('delete')
    .description('delete a notification')
    .requiredOption('--project <ID>')
    .argument('ID')
    .action(async (id: string, o, cmd: Command) => {
      const cli = new Cli(io, cmd);
      await cli.call('DELETE', `/v1/projects/${seg(o.project)}/notifications/${seg(id)}`);
      cli.print({ deleted: id }, () => io.out(`deleted notification ${id}`));
    });
}
