// Runner pools (docs/runner.md, "Runner pools"): create, change, delete, list
// them with their runners.
import type { Command } from 'commander';
import { Cli, CliError, type CliIo, seg } from './context.ts';

const split = (list: string) =>
  list
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);

// The fields a create or an update gives, from its flags.
function poolFields(o: Record<string, string | boolean | undefined>): Record<string, unknown> {
  if (o.projects !== undefined && o.allProjects) {
    throw new CliError('give --projects a,b or --all-projects, not both', 2);
  }
  let settings: unknown;
  if (typeof o.settings === 'string') {
    try {
      settings = JSON.parse(o.settings);
    } catch {
      throw new CliError('--settings must be a JSON object, e.g. \'{"idle_limit_s": 30}\'', 2);
    }
  }
  let max: number | undefined;
  if (typeof o.max === 'string') {
    max = Number(o.max);
    if (!Number.isInteger(max)) throw new CliError(`--max takes a whole number, not ${o.max}`, 2);
  }
  return {
    ...(typeof o.labels === 'string' ? { labels: split(o.labels) } : {}),
    ...(typeof o.trust === 'string' ? { trust: o.trust } : {}),
    ...(typeof o.projects === 'string' ? { projects: split(o.projects) } : {}),
    ...(o.allProjects ? { projects: '*' } : {}),
    ...(typeof o.provider === 'string' ? { provider: o.provider } : {}),
    ...(max !== undefined ? { max } : {}),
    ...(settings !== undefined ? { settings } : {}),
  };
}

// biome-ignore lint/suspicious/noExplicitAny: the API's pools.
function poolRow(p: any): string[] {
  return [
    p.name,
    p.provider,
    p.labels.join(','),
    p.trust,
    p.projects === '*' ? '*' : p.projects.join(','),
    String(p.max),
    `${p.runners?.starting ?? 0} starting, ${p.runners?.running ?? 0} running`,
  ];
}
const HEADERS = ['NAME', 'PROVIDER', 'LABELS', 'TRUST', 'PROJECTS', 'MAX', 'RUNNERS'];

function withPoolFlags(command: Command): Command {
  return command
    .option('--labels <a,b>', 'the labels its runners offer')
    .option('--trust <T>', 'trusted or untrusted (fork pull requests, each in a fresh runner)')
    .option('--projects <a,b>', "only these projects' tasks")
    .option('--all-projects', "every project's tasks")
    .option('--provider <P>', 'process or ecs')
    .option('--max <N>', 'the most runners at once')
    .option('--settings <JSON>', "the provider's settings, as a JSON object");
}

/** `pools`, `pool create|update|delete`. */
export function registerPools(program: Command, io: CliIo): void {
  program
    .command('pools')
    .description('list runner pools, with their runners')
    .action(async (_o, cmd: Command) => {
      const cli = new Cli(io, cmd);
      const reply = (await cli.call('GET', '/v1/pools')).json;
      cli.print(reply, () => cli.table(HEADERS, reply.pools.map(poolRow)));
    });
  const pool = program
    .command('pool')
    .description('create, change or delete a runner pool (runners started for waiting tasks)');
  withPoolFlags(
    pool.command('create').description('create a runner pool').requiredOption('--name <NAME>'),
  ).action(async (o, cmd: Command) => {
    const cli = new Cli(io, cmd);
    const created = (await cli.call('POST', '/v1/pools', { name: o.name, ...poolFields(o) })).json;
    cli.print(created, () => cli.table(HEADERS, [poolRow(created.pool)]));
  });
  withPoolFlags(
    pool
      .command('update')
      .description('change the settings given')
      .argument('[NAME]')
      .option('--name <NAME>', 'the pool (or as the argument)'),
  ).action(async (arg: string | undefined, o, cmd: Command) => {
    const cli = new Cli(io, cmd);
    const name = arg ?? o.name;
    if (!name) throw new CliError('pool update needs the pool: pool update NAME', 2);
    const updated = (await cli.call('PATCH', `/v1/pools/${seg(name)}`, poolFields(o))).json;
    cli.print(updated, () => cli.table(HEADERS, [poolRow(updated.pool)]));
  });
  pool
    .command('delete')
    .description('delete a pool (the sweep ends its runners)')
    .argument('NAME')
    .action(async (name: string, _o, cmd: Command) => {
      const cli = new Cli(io, cmd);
      await cli.call('DELETE', `/v1/pools/${seg(name)}`);
      cli.print({ deleted: name }, () => io.out(`deleted pool ${name}`));
    });
}
