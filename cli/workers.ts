// Workers: register one (its token shown once), list them, revoke one by name or id.
import type { Command } from 'commander';
import { Cli, CliError, type CliIo, seg } from './context.ts';

const split = (list: string) =>
  list
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);

/** `workers`, `worker create|revoke`. */
export function registerWorkers(program: Command, io: CliIo): void {
  program
    .command('workers')
    .description('list workers')
    .action(async (_o, cmd: Command) => {
      const cli = new Cli(io, cmd);
      const reply = (await cli.call('GET', '/v1/workers')).json;
      cli.print(reply, () =>
        cli.table(
          ['NAME', 'LABELS', 'TRUST', 'PROJECTS', 'LAST SEEN', 'STATE', 'ID'],
          // biome-ignore lint/suspicious/noExplicitAny: the API's workers.
          reply.workers.map((w: any) => [
            w.name,
            w.labels.join(','),
            w.untrusted ? 'untrusted' : 'trusted',
            w.projects === '*' ? '*' : w.projects.join(','),
            w.last_seen_at ?? 'never',
            w.revoked ? 'revoked' : w.ephemeral ? 'ephemeral' : 'active',
            w.id,
          ]),
        ),
      );
    });
  const worker = program.command('worker').description('register or revoke a worker');
  worker
    .command('create')
    .description('register a worker; prints its token once')
    .requiredOption('--name <NAME>')
    .option('--labels <a,b>', 'what its host offers', '')
    .option('--untrusted', 'it takes only untrusted tasks')
    .option('--projects <a,b>', "only these projects' tasks (default: every project)")
    .option('--all-projects', "every project's tasks")
    .option('--ephemeral', 'its token is good for one task')
    .action(async (o, cmd: Command) => {
      const cli = new Cli(io, cmd);
      if (o.projects !== undefined && o.allProjects) {
        throw new CliError('give --projects a,b or --all-projects, not both', 2);
      }
      const projects = o.projects === undefined ? '*' : split(o.projects);
      const created = (
        await cli.call('POST', '/v1/workers', {
          name: o.name,
          labels: split(o.labels),
          projects,
          ...(o.untrusted ? { untrusted: true } : {}),
          ...(o.ephemeral ? { ephemeral: true } : {}),
        })
      ).json;
      cli.print(created, () => {
        const w = created.worker;
        cli.table(
          ['NAME', 'LABELS', 'TRUST', 'PROJECTS', 'ID'],
          [
            [
              w.name,
              w.labels.join(','),
              w.untrusted ? 'untrusted' : 'trusted',
              w.projects === '*' ? '*' : w.projects.join(','),
              w.id,
            ],
          ],
        );
        if (projects === '*' && !o.allProjects) {
          io.out('this worker may claim tasks of every project; --projects a,b scopes it to those');
        }
        io.out(`worker token (shown once): ${created.token}`);
      });
    });
  worker
    .command('revoke')
    .description('revoke a worker (by name or id): its token stops working at once')
    .argument('[NAME_OR_ID]')
    .option('--id <ID>', 'the worker (or as the argument)')
    .action(async (arg: string | undefined, o, cmd: Command) => {
      const cli = new Cli(io, cmd);
      const given = arg ?? o.id;
      if (!given) throw new CliError('worker revoke needs a worker: worker revoke NAME-or-id', 2);
      // biome-ignore lint/suspicious/noExplicitAny: the API's workers.
      const workers: any[] = (await cli.call('GET', '/v1/workers')).json.workers;
      const byId = workers.find((w) => w.id === given);
      const byName = workers.filter((w) => w.name === given && !w.revoked);
      if (!byId && byName.length > 1) {
        throw new CliError(
          `${byName.length} active workers are named ${given}: revoke one by id (${byName.map((w) => w.id).join(', ')})`,
          2,
        );
      }
      const target = byId ?? byName[0];
      if (!target) throw new CliError(`no worker is named ${given} or has that id`);
      await cli.call('DELETE', `/v1/workers/${seg(target.id)}`);
      cli.print({ revoked: target.id, name: target.name }, () =>
        io.out(`worker ${target.name} (${target.id}) revoked: its token no longer works`),
      );
    });
}
