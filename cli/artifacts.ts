// Artifacts and caches (docs/artifacts.md): list a job's artifacts, download
// one, list and delete a project's caches.
import { createWriteStream } from 'node:fs';
import { basename, resolve } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream } from 'node:stream/web';
import type { Command } from 'commander';
import { Cli, CliError, type CliIo, seg } from './context.ts';

/** `artifacts`, `download`, `caches`, `cache delete`. */
export function registerArtifacts(program: Command, io: CliIo): void {
  program
    .command('artifacts')
    .description("list a job's artifacts")
    .argument('JOB', 'PROJECT#NUMBER or the job id')
    .option('--project <ID>', 'the project, when the job is given by its number alone')
    .action(async (ref: string, o, cmd: Command) => {
      const cli = new Cli(io, cmd);
      const id = await cli.jobId(ref, o.project);
      const reply = (await cli.call('GET', `/v1/jobs/${seg(id)}/artifacts`)).json;
      cli.print(reply, () =>
        cli.table(
          ['TASK', 'PATH', 'SIZE', 'EXPIRES', 'ID'],
          // biome-ignore lint/suspicious/noExplicitAny: the API's artifacts.
          reply.artifacts.map((a: any) => [
            a.task_name,
            a.path,
            `${a.size} bytes`,
            a.expires_at,
            a.id,
          ]),
        ),
      );
    });

  program
    .command('download')
    .description(
      'download an artifact as itself (a directory as one tar.gz named after its task), into the current directory or -o PATH',
    )
    .argument('ARTIFACT_ID')
    .option('-o, --output <PATH>', 'the file to write')
    .option('--file <PATH>', 'the same as --output')
    .action(async (artifact: string, o, cmd: Command) => {
      const cli = new Cli(io, cmd);
      // The redirect goes to the store's short-lived URL: the admin token stays here.
      const first = await cli.call('GET', `/v1/artifacts/${seg(artifact)}`, undefined, {
        redirect: 'manual',
      });
      const location = first.headers.get('location');
      if (!location)
        throw new CliError(`GET /v1/artifacts/${artifact}: HTTP ${first.status}: no redirect`);
      const res = await cli.send(new URL(location, cli.base));
      if (!res.ok || !res.body) throw new CliError(`downloading the artifact: HTTP ${res.status}`);
      const named = /filename\*=UTF-8''([^;]+)/.exec(res.headers.get('content-disposition') ?? '');
      const given = o.output ?? o.file;
      const file = resolve(cli.cwd, given ?? basename(decodeURIComponent(named?.[1] ?? artifact)));
      await pipeline(
        Readable.fromWeb(res.body as ReadableStream<Uint8Array>),
        createWriteStream(file),
      );
      cli.print({ path: file }, () => io.out(`wrote ${file}`));
    });

  program
    .command('caches')
    .description("list a project's caches")
    .requiredOption('--project <ID>')
    .action(async (o, cmd: Command) => {
      const cli = new Cli(io, cmd);
      const reply = (await cli.call('GET', `/v1/projects/${seg(o.project)}/caches`)).json;
      cli.print(reply, () =>
        cli.table(
          ['KEY', 'SCOPE', 'SIZE', 'LAST USED'],
          // biome-ignore lint/suspicious/noExplicitAny: the API's caches.
          reply.caches.map((c: any) => [c.key, c.scope, `${c.size} bytes`, c.last_used_at]),
        ),
      );
    });
  program
    .command('cache')
    .description('delete a cache')
    .command('delete')
    .description('delete a cache key (every scope unless --scope)')
    .requiredOption('--project <ID>')
    .requiredOption('--name <KEY>')
    .option('--scope <SCOPE>')
    .action(async (o, cmd: Command) => {
      const cli = new Cli(io, cmd);
      const scope = o.scope ? `?scope=${seg(o.scope)}` : '';
      await cli.call('DELETE', `/v1/projects/${seg(o.project)}/caches/${seg(o.name)}${scope}`);
      cli.print({ deleted: o.name, ...(o.scope ? { scope: o.scope } : {}) }, () =>
        io.out(`deleted cache ${o.name}`),
      );
    });
}
