// Projects: list, create (its webhook URL and secret to paste into the
// forge), update, show, delete, their audit, and a signed test push.
import { type Command, Option } from 'commander';
import { DEFAULT_FORGE } from '../lib/states.ts';
import { sendPush } from '../local/push.ts';
import {
  bool,
  Cli,
  CliError,
  type CliIo,
  readKept,
  readValue,
  refuseOnTheLine,
  seg,
} from './context.ts';

const noForgeToken = (io: CliIo, value: unknown) =>
  refuseOnTheLine(
    io,
    'forge-token',
    value,
    'Give --forge-token-file PATH, or --forge-token-file - to read it from standard input',
  );

const FLAGS: [flag: string, field: string][] = [
  ['name', 'name'],
  ['repoUrl', 'repo_url'],
  ['forgeUrl', 'forge_url'],
  ['forkPullRequests', 'fork_pull_requests'],
  ['botPullRequests', 'bot_pull_requests'],
  ['visibility', 'visibility'],
];

// biome-ignore lint/suspicious/noExplicitAny: a project as the API answers it.
function showProject(cli: Cli, p: any): void {
  cli.table(
    ['FIELD', 'VALUE'],
    [
      ['id', p.id],
      ['name', p.name],
      ['forge', p.forge],
      ['repo', p.repo],
      ['repo_url', p.repo_url],
      ['forge_url', p.forge_url ?? ''],
      ['has_forge_token', String(p.has_forge_token)],
      ['visibility', p.visibility],
      ['enabled', String(p.enabled)],
      ['cancel_superseded', String(p.cancel_superseded)],
      ['fork_pull_requests', p.fork_pull_requests],
      ['bot_pull_requests', p.bot_pull_requests],
      ['default_branch', p.default_branch ?? ''],
      ['github_app', p.github_app === undefined ? undefined : String(p.github_app)],
    ].filter(([, v]) => v !== undefined),
  );
}

// `a,b` as a list; "" is the empty list.
function listFlag(value: string): string[] {
  return value
    .split(',')
    .map((item) => item.trim())
    .filter((item) => item !== '');
}

/** `projects`, `project create|update|show|delete`, `audit`, `webhook push`. */
export function registerProjects(program: Command, io: CliIo): void {
  program
    .command('projects')
    .description('list projects')
    .action(async (_o, cmd: Command) => {
      const cli = new Cli(io, cmd);
      const reply = (await cli.call('GET', '/v1/projects')).json;
      cli.print(reply, () =>
        cli.table(
          ['ID', 'NAME', 'FORGE', 'REPO', 'VISIBILITY', 'ENABLED'],
          // biome-ignore lint/suspicious/noExplicitAny: the API's projects.
          reply.projects.map((p: any) => [p.id, p.name, p.forge, p.repo, p.visibility, p.enabled]),
        ),
      );
    });

  const project = program
    .command('project')
    .description('create, change, show or delete a project');
  project
    .command('create')
    .description(
      'create a project; prints its webhook URL and its secret (shown once), or none with --github-app',
    )
    .requiredOption('--id <ID>', 'its id, used in URLs and as PROJECT#NUMBER')
    .requiredOption('--repo <OWNER/NAME>', 'the repository, as the forge names it')
    .requiredOption('--repo-url <URL>', 'where to clone from (URL or absolute path)')
    .option('--forge <NAME>', 'github, gitea or gitlab', DEFAULT_FORGE)
    .option('--forge-url <URL>', "the forge's API")
    .option('--forge-token-file <PATH>', 'a forge token, from a file (- for standard input)')
    .addOption(new Option('--forge-token <TOKEN>').hideHelp())
    .option('--name <NAME>', 'a name for people (default: the id)')
    .option('--cancel-superseded <BOOL>', 'true or false')
    .option('--fork-pull-requests <MODE>', 'approve, run or ignore')
    .option('--visibility <V>', 'private or public')
    .option('--bot-pull-requests <MODE>', 'untrusted or trusted')
    .option('--org-groups <A,B>', 'the org: concurrency groups its pipelines may use')
    .option(
      '--github-app',
      "served by the GitHub App: its webhook delivers, its installation's tokens are used, no webhook secret",
    )
    .action(async (o, cmd: Command) => {
      noForgeToken(io, o.forgeToken);
      const cli = new Cli(io, cmd);
      const body: Record<string, unknown> = {
        id: o.id,
        name: o.name ?? o.id,
        forge: o.forge,
        repo: o.repo,
        repo_url: o.repoUrl,
      };
      if (o.forgeUrl) body.forge_url = o.forgeUrl;
      if (o.forgeTokenFile !== undefined) {
        body.forge_token = await readValue(io, 'the forge token', o.forgeTokenFile);
      }
      const cancel = bool('cancel-superseded', o.cancelSuperseded);
      if (cancel !== undefined) body.cancel_superseded = cancel;
      if (o.forkPullRequests) body.fork_pull_requests = o.forkPullRequests;
      if (o.visibility) body.visibility = o.visibility;
      if (o.botPullRequests) body.bot_pull_requests = o.botPullRequests;
      if (o.orgGroups !== undefined) body.org_groups = listFlag(o.orgGroups);
      if (o.githubApp) body.github_app = true;
      const created = (await cli.call('POST', '/v1/projects', body)).json;
      const forge = created.project?.forge ?? o.forge;
      cli.print(created, () => {
        showProject(cli, created.project);
        io.out('');
        if (created.project?.github_app) {
          // The app's webhook delivers this repository's events: there is no secret to paste.
          io.out(
            `Served by the GitHub App: install the app on ${created.project.repo} at GitHub (or add the repository to its installation); no webhook to add. Jobs show as check runs on the commit.`,
          );
          return;
        }
        io.out('Add a webhook to the repository (push and pull request events):');
        io.out(`  payload URL:    ${cli.base}/v1/webhooks/${forge}`);
        io.out('  content type:   application/json');
        if (created.webhook_secret)
          io.out(`webhook secret (shown once): ${created.webhook_secret}`);
      });
    });
  project
    .command('update')
    .description('change the settings given')
    .argument('[ID]', 'the project')
    .option('--id <ID>', 'the project (or as the argument)')
    .option('--name <N>')
    .option('--repo-url <URL>')
    .option('--forge-url <URL>', 'a new forge URL drops the stored token unless one is given too')
    .option('--drop-forge-url', "back to the forge's public API")
    .option('--forge-token-file <PATH>', 'a forge token, from a file (- for standard input)')
    .addOption(new Option('--forge-token <TOKEN>').hideHelp())
    .option('--drop-forge-token')
    .option('--enabled <BOOL>')
    .option('--cancel-superseded <BOOL>')
    .option('--fork-pull-requests <MODE>')
    .option('--bot-pull-requests <MODE>')
    .option('--visibility <V>')
    .option('--org-groups <A,B>', 'the org: concurrency groups its pipelines may use ("" for none)')
    .action(async (arg: string | undefined, o, cmd: Command) => {
      noForgeToken(io, o.forgeToken);
      const cli = new Cli(io, cmd);
      const id = arg ?? o.id;
      if (!id) throw new CliError('project update needs the project: project update ID', 2);
      const changes: Record<string, unknown> = {};
      for (const [flag, field] of FLAGS) if (o[flag] !== undefined) changes[field] = o[flag];
      const enabled = bool('enabled', o.enabled);
      if (enabled !== undefined) changes.enabled = enabled;
      const cancel = bool('cancel-superseded', o.cancelSuperseded);
      if (cancel !== undefined) changes.cancel_superseded = cancel;
      if (o.forgeTokenFile !== undefined && o.dropForgeToken) {
        throw new CliError('give --forge-token-file or --drop-forge-token, not both', 2);
      }
      if (o.forgeUrl !== undefined && o.dropForgeUrl) {
        throw new CliError('give --forge-url or --drop-forge-url, not both', 2);
      }
      if (o.orgGroups !== undefined) changes.org_groups = listFlag(o.orgGroups);
      if (o.dropForgeUrl) changes.forge_url = null;
      if (o.dropForgeToken) changes.forge_token = null;
      if (o.forgeTokenFile !== undefined) {
        changes.forge_token = await readValue(io, 'the forge token', o.forgeTokenFile);
      }
      if (Object.keys(changes).length === 0) {
        throw new CliError('project update needs at least one setting to change', 2);
      }
      const updated = (await cli.call('PATCH', `/v1/projects/${seg(id)}`, changes)).json;
      cli.print(updated, () => {
        showProject(cli, updated.project);
        if (changes.forge_url !== undefined && changes.forge_token === undefined) {
          io.out(
            'the stored forge token was dropped with the old forge URL: give it again with --forge-token-file if the project needs one',
          );
        }
      });
    });
  project
    .command('show')
    .description('show a project')
    .argument('[ID]')
    .option('--id <ID>')
    .action(async (arg: string | undefined, o, cmd: Command) => {
      const cli = new Cli(io, cmd);
      const id = arg ?? o.id;
      if (!id) throw new CliError('project show needs the project: project show ID', 2);
      const shown = (await cli.call('GET', `/v1/projects/${seg(id)}`)).json;
      cli.print(shown, () => showProject(cli, shown.project ?? shown));
    });
  project
    .command('delete')
    .description('delete a project, its jobs, secrets and schedules')
    .argument('ID')
    .action(async (id: string, _o, cmd: Command) => {
      const cli = new Cli(io, cmd);
      await cli.call('DELETE', `/v1/projects/${seg(id)}`);
      cli.print({ deleted: id }, () => io.out(`deleted project ${id}`));
    });

  program
    .command('audit')
    .description(
      "a project's audit (--project), or the installation's own events (projects, workers, sessions); newest first",
    )
    .option('--project <ID>', "the project's audit; without it, the installation's")
    .option('--limit <N>', 'how many (at most 100)')
    .option('--before <N>', 'older than this event id')
    .action(async (o, cmd: Command) => {
      const cli = new Cli(io, cmd);
      const query = new URLSearchParams();
      if (o.limit) query.set('limit', o.limit);
      if (o.before) query.set('before', o.before);
      const path = o.project ? `/v1/projects/${seg(o.project)}/audit` : '/v1/audit';
      const reply = (await cli.call('GET', `${path}?${query}`)).json;
      cli.print(reply, () =>
        cli.table(
          ['ID', 'AT', 'BY', 'ACTION', 'DETAIL'],
          // biome-ignore lint/suspicious/noExplicitAny: the API's audit events.
          reply.events.map((e: any) => [
            e.id,
            e.at ?? e.created_at,
            e.actor ?? e.by ?? '',
            e.action,
            e.detail ? JSON.stringify(e.detail) : '',
          ]),
        ),
      );
    });

  program
    .command('webhook')
    .description('send a signed test webhook')
    .command('push')
    .description('sign and send a push webhook as the forge would; prints the job it started')
    .requiredOption('--project <ID>')
    .requiredOption('--sha <SHA>', 'the commit pushed')
    .option('--secret-file <PATH>', "the project's webhook secret, from a file")
    .option('--secret <SECRET>', "the project's webhook secret")
    .option('--ref <REF>', 'the ref pushed', 'refs/heads/main')
    .option('--before <SHA>', 'the commit the ref was at before (what changes: compares with)')
    .action(async (o, cmd: Command) => {
      const cli = new Cli(io, cmd);
      const { project } = (await cli.call('GET', `/v1/projects/${seg(o.project)}`)).json;
      if (o.secretFile === undefined && !o.secret) {
        throw new CliError('--secret-file PATH (or --secret) is required', 2);
      }
      const res = await sendPush({
        url: cli.base,
        forge: project.forge,
        repo: project.repo,
        repoUrl: project.repo_url,
        sha: o.sha,
        ref: o.ref,
        ...(o.before ? { before: o.before } : {}),
        secret: o.secretFile !== undefined ? readKept(o.secretFile, cli.cwd) : o.secret,
        message: `sent by ${cli.name}`,
        fetch: (url, init) => cli.send(url, init),
      });
      let body: unknown = res.text;
      try {
        body = JSON.parse(res.text);
      } catch {
        // Not JSON: shown as it came.
      }
      const ok = res.status >= 200 && res.status < 300;
      cli.print({ status: res.status, body }, () => {
        // biome-ignore lint/suspicious/noExplicitAny: the webhook's answer.
        const started = body as any;
        if (ok && started?.number !== undefined) {
          io.out(`HTTP ${res.status}: started ${o.project}#${started.number} (${started.job_id})`);
          io.out(`follow it: ${cli.name} job ${o.project}#${started.number}`);
        } else {
          io.out(`HTTP ${res.status} ${res.text}`);
        }
      });
      if (!ok) throw new CliError('', 1);
    });
}
