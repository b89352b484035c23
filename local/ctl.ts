// The admin CLI (`npm run ctl -- <command>`): creates projects, workers and
// secrets, sends a signed test webhook, lists jobs and shows one, reruns them,
// all through the HTTP API like any other client; and checks a pipeline file
// with the server's compiler, with no server at all (`validate`).
import { execFileSync } from 'node:child_process';
import { createWriteStream, existsSync, readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { basename, dirname, isAbsolute, join, relative, resolve } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { parseArgs } from 'node:util';
import { formatIssue, planPipeline } from '../lib/app/jobs.ts';
import { taskLines } from '../lib/pages/graph.ts';
import { sendPush } from './push.ts';

export const USAGE = `usage: npm run ctl -- <command> [options]

  projects                                  list projects
  project create --id ID --repo OWNER/NAME --repo-url URL|PATH
                 [--forge github|gitea] [--forge-url URL] [--forge-token-file PATH|-]
                 [--name N] [--cancel-superseded true|false]
                 [--fork-pull-requests approve|run|ignore] [--visibility private|public]
                 [--bot-pull-requests untrusted|trusted]
                                            create a project; prints its webhook secret once
  project update ID [--name N] [--repo-url URL|PATH] [--forge-url URL | --drop-forge-url]
                 [--forge-token-file PATH|- | --drop-forge-token] [--enabled true|false]
                 [--cancel-superseded true|false] [--fork-pull-requests approve|run|ignore]
                 [--bot-pull-requests untrusted|trusted] [--visibility private|public]
                                            change the settings given (a new --forge-url
                                            drops the stored token unless one is given too;
                                            --drop-forge-url: back to the forge's public API)
  project show ID                           show a project
  worker create --name NAME [--labels a,b] [--untrusted]
                [--projects a,b | --all-projects] [--ephemeral]
                                            register a worker (--untrusted: it takes only
                                            untrusted tasks; --projects: only these projects'
                                            tasks, the default being every project;
                                            --ephemeral: its token is good for one task);
                                            prints its token once
  worker revoke ID                          revoke a worker: its token stops working at once
  workers                                   list workers
  pool create --name NAME --provider process|ecs --max N [--labels a,b]
              [--trust trusted|untrusted] [--projects a,b] [--settings JSON]
                                            a runner pool: runners started for waiting tasks
  pool update NAME [--labels a,b] [--trust T] [--projects a,b | --all-projects]
              [--provider P] [--max N] [--settings JSON]
  pool delete NAME                          delete a pool (the sweep ends its runners)
  pools                                     list pools, with their runners
  secret set --project ID --name NAME [--file PATH]
                                            set a secret to what standard input holds (a
                                            terminal asks for it without echoing it) or the
                                            file PATH holds; one final line feed is dropped
  secrets --project ID                      list secret names
  webhook push --project ID (--secret-file PATH | --secret WEBHOOK_SECRET) --sha SHA
               [--ref refs/heads/main]
                                            sign and send a push webhook as the forge would
  trigger --project ID [--ref main] [--sha SHA] [--input NAME=VALUE]...
                                            start a job by hand (without --sha: the ref's
                                            head); --input gives the pipeline's inputs
  schedules --project ID                    list a project's schedules
  schedule create --project ID --name NAME --cron "0 3 * * *" [--timezone UTC]
                  [--ref BRANCH] [--input NAME=VALUE]... [--catch-up latest|none]
                  [--enabled true|false]
                                            add a schedule (cron: 5 fields or @hourly,
                                            @daily, @weekly, @monthly; ref: default branch)
  schedule update --project ID --name NAME [--cron C] [--timezone TZ] [--ref BRANCH]
                  [--input NAME=VALUE]... [--catch-up latest|none] [--enabled true|false]
                                            change the settings given
  schedule delete --project ID --name NAME  delete a schedule (its jobs stay)
  jobs --project ID [--limit N]             list a project's jobs, newest first
  job JOB_ID                                show a job, its tasks and its page's link
  job approve JOB_ID                        let a blocked (untrusted) job run, still untrusted
  cancel JOB_ID                             cancel a job (a blocked one is declined)
  rerun JOB_ID [--failed-only]              run a finished job again as a new job
                                            (--failed-only: successful tasks are kept)
  artifacts JOB_ID                          list a job's artifacts (path, size, expiry, id)
  download ARTIFACT_ID [--file PATH]        download an artifact as itself (a directory
                                            as one tar.gz named after its task); default
                                            file: its name, in the current directory
  caches --project ID                       list a project's caches (key, scope, size, last use)
  cache delete --project ID --name KEY [--scope SCOPE]
                                            delete a cache key (every scope unless --scope)
  log TASK_ID [--attempt N]                 print a task's log (a task kept by a
                                            --failed-only rerun: the log it was kept from)
  validate [FILE] [--ref REF]               check a pipeline file (default .conductor.yml)
                                            with the server's compiler, no server needed:
                                            its problems, or the tasks a job for REF runs
                                            (default: the current branch) and those that
                                            only leaves out; included files are read from
                                            the working tree. Exit 0 valid, 1 invalid

  --url URL      the control plane (default http://127.0.0.1:$PORT, PORT defaulting to 8080)
  --token-file PATH  the admin token, read from a file (or --token TOKEN, which npm
                 echoes; default $CONDUCTOR_ADMIN_TOKEN, or the one npm start keeps in
                 $CONDUCTOR_DATA_DIR/admin-token)

Secret values and forge tokens are never taken from the command line: npm prints
its command line, and the shell keeps it in its history.`;

export interface CtlIo {
  out: (line: string) => void;
  env: NodeJS.ProcessEnv;
  fetch?: typeof fetch;
  /** Where secret values are read from (`secret set`, `--forge-token-file -`). */
  stdin?: AsyncIterable<string | Buffer> & { isTTY?: boolean };
  /** Asks for a value on a terminal without echoing it (used when stdin is a terminal). */
  prompt?: (question: string) => Promise<string>;
  /** What relative paths (validate, --file) are relative to; default the process's. */
  cwd?: string;
}

/** A command used wrongly: exit 2, with the usage unless `showUsage` is false. */
class UsageError extends Error {
  constructor(
    message: string,
    readonly showUsage = true,
  ) {
    super(message);
  }
}

function required(values: Record<string, unknown>, name: string): string {
  const v = values[name];
  if (typeof v !== 'string' || v === '') throw new UsageError(`--${name} is required`);
  return v;
}

// npm prints the command line it runs (`> node ... secret set --value ...`),
// so a value given there shows on the terminal, and in the shell's history.
const ECHOED =
  'npm prints its command line, so the value would show in your terminal and stay in your shell history';

function boolFlag(values: Record<string, unknown>, name: string): boolean | undefined {
  const v = values[name];
  if (v === undefined) return undefined;
  if (v === 'true' || v === 'false') return v === 'true';
  throw new UsageError(`--${name} takes true or false, not ${JSON.stringify(v)}`);
}

/** Everything a stream holds, as text. */
async function readAll(stream: AsyncIterable<string | Buffer>): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) {
    chunks.push(typeof chunk === 'string' ? Buffer.from(chunk, 'utf8') : chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/**
 * A secret value from a file, or with `-` (or no path) from standard input: a
 * terminal is asked without echo, anything else read to its end. One final
 * line feed is dropped (what `echo` and editors add); an empty value is refused.
 */
async function readValue(io: CtlIo, what: string, path: string | undefined): Promise<string> {
  let value: string;
  if (path !== undefined && path !== '-') {
    try {
      value = readFileSync(resolve(io.cwd ?? process.cwd(), path), 'utf8');
    } catch (err) {
      throw new UsageError(`cannot read ${path}: ${(err as Error).message}`, false);
    }
  } else if (io.stdin?.isTTY && io.prompt) {
    value = await io.prompt(`${what} (not echoed): `);
  } else if (io.stdin) {
    value = await readAll(io.stdin);
  } else {
    throw new UsageError(`no standard input to read ${what} from: give a file`, false);
  }
  value = value.replace(/\r?\n$/, '');
  if (value === '') throw new UsageError(`${what} is empty: nothing was set`, false);
  return value;
}

/**
 * Reads a line from a terminal without echoing it: raw mode, so no character
 * reaches the screen; backspace edits, Enter ends, Ctrl-C gives up.
 */
export function promptHidden(
  question: string,
  input: NodeJS.ReadableStream & { setRawMode?: (raw: boolean) => unknown },
  output: NodeJS.WritableStream,
): Promise<string> {
  output.write(question);
  input.setRawMode?.(true);
  input.setEncoding('utf8');
  input.resume();
  return new Promise((done, fail) => {
    let value = '';
    const finish = () => {
      input.off('data', onData);
      input.setRawMode?.(false);
      input.pause();
      output.write('\n');
    };
    const onData = (chunk: string | Buffer) => {
      for (const ch of String(chunk)) {
        if (ch === '\r' || ch === '\n' || ch === '\u0004') {
          finish();
          done(value);
          return;
        }
        if (ch === '\u0003') {
          finish();
          fail(new UsageError('cancelled: nothing was set', false));
          return;
        }
        if (ch === '\u007f' || ch === '\b') value = [...value].slice(0, -1).join('');
        else value += ch;
      }
    };
    input.on('data', onData);
  });
}

function adminToken(values: Record<string, unknown>, env: NodeJS.ProcessEnv): string {
  if (typeof values['token-file'] === 'string') {
    return readSecretFile(values['token-file'], env.INIT_CWD ?? process.cwd());
  }
  if (typeof values.token === 'string') return values.token;
  if (env.CONDUCTOR_ADMIN_TOKEN) return env.CONDUCTOR_ADMIN_TOKEN;
  const file = join(env.CONDUCTOR_DATA_DIR || '.conductor', 'admin-token');
  if (existsSync(file)) return readFileSync(file, 'utf8').trim();
  throw new UsageError(
    'no admin token: pass --token-file PATH, set CONDUCTOR_ADMIN_TOKEN, or run npm start first',
  );
}

/** A token or secret kept in a file (one final line feed dropped), so it stays off the command line. */
function readSecretFile(path: string, cwd: string): string {
  try {
    return readFileSync(resolve(cwd, path), 'utf8').replace(/\r?\n$/, '');
  } catch (err) {
    throw new UsageError(`cannot read ${path}: ${(err as Error).message}`, false);
  }
}

/** Runs one CLI command; answers the process exit code. */
export async function runCtl(argv: string[], io: CtlIo): Promise<number> {
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(argv);
  } catch (err) {
    io.out(`${err instanceof Error ? err.message : String(err)}\n\n${USAGE}`);
    return 2;
  }
  return run(parsed, io);
}

function parse(argv: string[]) {
  return parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      url: { type: 'string' },
      token: { type: 'string' },
      'token-file': { type: 'string' },
      id: { type: 'string' },
      name: { type: 'string' },
      repo: { type: 'string' },
      'repo-url': { type: 'string' },
      forge: { type: 'string' },
      'forge-url': { type: 'string' },
      'forge-token': { type: 'string' },
      'forge-token-file': { type: 'string' },
      'drop-forge-token': { type: 'boolean' },
      'drop-forge-url': { type: 'boolean' },
      enabled: { type: 'string' },
      'cancel-superseded': { type: 'string' },
      file: { type: 'string' },
      'failed-only': { type: 'boolean' },
      labels: { type: 'string' },
      untrusted: { type: 'boolean' },
      projects: { type: 'string' },
      'all-projects': { type: 'boolean' },
      ephemeral: { type: 'boolean' },
      'fork-pull-requests': { type: 'string' },
      'bot-pull-requests': { type: 'string' },
      visibility: { type: 'string' },
      project: { type: 'string' },
      value: { type: 'string' },
      secret: { type: 'string' },
      'secret-file': { type: 'string' },
      sha: { type: 'string' },
      ref: { type: 'string' },
      limit: { type: 'string' },
      attempt: { type: 'string' },
      input: { type: 'string', multiple: true },
      cron: { type: 'string' },
      timezone: { type: 'string' },
      'catch-up': { type: 'string' },
      scope: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
      // Runner pools (poolCommand, below).
      provider: { type: 'string' },
      max: { type: 'string' },
      trust: { type: 'string' },
      settings: { type: 'string' },
    },
  });
}

async function run({ values, positionals }: ReturnType<typeof parse>, io: CtlIo): Promise<number> {
  const [command, sub, arg] = positionals;
  if (values.help || !command) {
    io.out(USAGE);
    // Asked for, it is an answer; for want of a command, a usage error.
    return values.help ? 0 : 2;
  }
  const base = (values.url ?? `http://127.0.0.1:${io.env.PORT || 8080}`).replace(/\/$/, '');
  const doFetch = io.fetch ?? fetch;

  async function api(method: string, path: string, body?: unknown, token?: string) {
    const res = await doFetch(`${base}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${token ?? adminToken(values, io.env)}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    const json =
      text && res.headers.get('content-type')?.includes('json') ? JSON.parse(text) : null;
    if (!res.ok) {
      const message = json?.error?.message ?? (text || res.statusText);
      throw new Error(`${method} ${path}: HTTP ${res.status}: ${message}`);
    }
    return { status: res.status, json, text, headers: res.headers };
  }
  const print = (value: unknown) => io.out(JSON.stringify(value, null, 2));

  try {
    // Secrets on the command line are refused before anything is sent.
    if (values.value !== undefined) {
      throw new UsageError(
        `--value is refused: ${ECHOED}. Pipe the value in (printf %s "$VALUE" | npm run ctl -- secret set ...), type it when asked, or give --file PATH`,
        false,
      );
    }
    if (values['forge-token'] !== undefined) {
      throw new UsageError(
        `--forge-token is refused: ${ECHOED}. Give --forge-token-file PATH, or --forge-token-file - to read it from standard input`,
        false,
      );
    }
    if (command === 'validate') return await validate(positionals.slice(1), values, io);
    switch (
      `${command}${sub && ['create', 'update', 'show', 'set', 'push', 'approve', 'revoke', 'delete'].includes(sub) ? ` ${sub}` : ''}`
    ) {
      case 'projects':
        print((await api('GET', '/v1/projects')).json);
        return 0;
      case 'project create': {
        const id = required(values, 'id');
        const created = await api('POST', '/v1/projects', {
          id,
          name: values.name ?? id,
          forge: values.forge ?? 'github',
          repo: required(values, 'repo'),
          repo_url: required(values, 'repo-url'),
          ...(values['forge-url'] ? { forge_url: values['forge-url'] } : {}),
          ...(values['forge-token-file'] !== undefined
            ? { forge_token: await readValue(io, 'the forge token', values['forge-token-file']) }
            : {}),
          ...(values['cancel-superseded'] !== undefined
            ? { cancel_superseded: boolFlag(values, 'cancel-superseded') }
            : {}),
          ...(values['fork-pull-requests']
            ? { fork_pull_requests: values['fork-pull-requests'] }
            : {}),
          ...(values.visibility ? { visibility: values.visibility } : {}),
          ...(values['bot-pull-requests']
            ? { bot_pull_requests: values['bot-pull-requests'] }
            : {}),
        });
        print(created.json);
        io.out(`webhook secret (shown once): ${created.json.webhook_secret}`);
        return 0;
      }
      case 'project update': {
        const id = arg ?? required(values, 'id');
        const changes: Record<string, unknown> = Object.fromEntries(
          (
            [
              ['name', 'name'],
              ['repo-url', 'repo_url'],
              ['forge-url', 'forge_url'],
              ['fork-pull-requests', 'fork_pull_requests'],
              ['bot-pull-requests', 'bot_pull_requests'],
              ['visibility', 'visibility'],
            ] as const
          )
            .filter(([flag]) => values[flag] !== undefined)
            .map(([flag, field]) => [field, values[flag]]),
        );
        for (const [flag, field] of [
          ['enabled', 'enabled'],
          ['cancel-superseded', 'cancel_superseded'],
        ] as const) {
          const value = boolFlag(values, flag);
          if (value !== undefined) changes[field] = value;
        }
        if (values['forge-token-file'] !== undefined && values['drop-forge-token']) {
          throw new UsageError('give --forge-token-file or --drop-forge-token, not both');
        }
        if (values['forge-url'] !== undefined && values['drop-forge-url']) {
          throw new UsageError('give --forge-url or --drop-forge-url, not both');
        }
        if (values['drop-forge-url']) changes.forge_url = null;
        if (values['drop-forge-token']) changes.forge_token = null;
        if (values['forge-token-file'] !== undefined) {
          changes.forge_token = await readValue(io, 'the forge token', values['forge-token-file']);
        }
        if (Object.keys(changes).length === 0) {
          throw new UsageError('project update needs at least one setting to change');
        }
        print((await api('PATCH', `/v1/projects/${encodeURIComponent(id)}`, changes)).json);
        if (changes.forge_url !== undefined && changes.forge_token === undefined) {
          io.out(
            'the stored forge token was dropped with the old forge URL: give it again with --forge-token-file if the project needs one',
          );
        }
        return 0;
      }
      case 'project show':
        print(
          (await api('GET', `/v1/projects/${encodeURIComponent(arg ?? required(values, 'id'))}`))
            .json,
        );
        return 0;
      case 'worker create': {
        const labels = (values.labels ?? '')
          .split(',')
          .map((l) => l.trim())
          .filter(Boolean);
        if (values.projects !== undefined && values['all-projects']) {
          throw new UsageError('give --projects a,b or --all-projects, not both');
        }
        const projects =
          values.projects === undefined
            ? '*'
            : values.projects
                .split(',')
                .map((p) => p.trim())
                .filter(Boolean);
        const created = await api('POST', '/v1/workers', {
          name: required(values, 'name'),
          labels,
          projects,
          ...(values.untrusted ? { untrusted: true } : {}),
          ...(values.ephemeral ? { ephemeral: true } : {}),
        });
        print(created.json.worker);
        if (projects === '*' && !values['all-projects']) {
          io.out('this worker may claim tasks of every project; --projects a,b scopes it to those');
        }
        io.out(`worker token (shown once): ${created.json.token}`);
        return 0;
      }
      case 'worker revoke': {
        const id = arg ?? required(values, 'id');
        await api('DELETE', `/v1/workers/${encodeURIComponent(id)}`);
        io.out(`worker ${id} revoked: its token no longer works`);
        return 0;
      }
      case 'workers':
        print((await api('GET', '/v1/workers')).json);
        return 0;
      // Runner pools: poolCommand, below.
      case 'pool create':
      case 'pool update':
      case 'pool delete':
      case 'pools':
        return await poolCommand(positionals, values, api, print);
      case 'secret set': {
        const project = required(values, 'project');
        const name = required(values, 'name');
        // A missing admin token is said before anyone types the value.
        adminToken(values, io.env);
        const value = await readValue(io, `the value of ${name}`, values.file);
        const set = await api(
          'PUT',
          `/v1/projects/${encodeURIComponent(project)}/secrets/${encodeURIComponent(name)}`,
          { value },
        );
        io.out(`secret ${name} set for ${project}`);
        const warning = set.headers.get('x-conductor-warning');
        if (warning) io.out(`warning: ${warning}`);
        return 0;
      }
      case 'secrets':
        print(
          (
            await api(
              'GET',
              `/v1/projects/${encodeURIComponent(required(values, 'project'))}/secrets`,
            )
          ).json,
        );
        return 0;
      case 'webhook push': {
        const projectId = required(values, 'project');
        const { project } = (await api('GET', `/v1/projects/${encodeURIComponent(projectId)}`))
          .json;
        const res = await sendPush({
          url: base,
          forge: project.forge,
          repo: project.repo,
          repoUrl: project.repo_url,
          sha: required(values, 'sha'),
          ref: values.ref ?? 'refs/heads/main',
          secret:
            typeof values['secret-file'] === 'string'
              ? readSecretFile(values['secret-file'], io.cwd ?? process.cwd())
              : required(values, 'secret'),
          message: 'sent by npm run ctl',
          fetch: doFetch,
        });
        io.out(`HTTP ${res.status} ${res.text}`);
        return res.status >= 200 && res.status < 300 ? 0 : 1;
      }
      case 'trigger': {
        const project = required(values, 'project');
        const inputs = inputPairs(values.input);
        print(
          (
            await api('POST', `/v1/projects/${encodeURIComponent(project)}/jobs`, {
              ref: values.ref ?? 'main',
              ...(values.sha ? { sha: values.sha } : {}),
              ...(inputs ? { inputs } : {}),
            })
          ).json,
        );
        return 0;
      }
      case 'schedules': {
        const project = required(values, 'project');
        const { schedules } = (
          await api('GET', `/v1/projects/${encodeURIComponent(project)}/schedules`)
        ).json;
        for (const s of schedules) {
          io.out(
            `${s.name}\t${s.cron}\t${s.timezone}\t${s.ref ?? '(default branch)'}\t${s.enabled ? `next ${s.next_run_at}` : 'disabled'}${s.last_error ? `\tlast error: ${s.last_error}` : ''}`,
          );
        }
        return 0;
      }
      case 'schedule create':
      case 'schedule update': {
        const project = encodeURIComponent(required(values, 'project'));
        const name = required(values, 'name');
        const inputs = inputPairs(values.input);
        const body: Record<string, unknown> = {
          ...(values.cron !== undefined ? { cron: values.cron } : {}),
          ...(values.timezone !== undefined ? { timezone: values.timezone } : {}),
          ...(values.ref !== undefined ? { ref: values.ref } : {}),
          ...(inputs ? { inputs } : {}),
          ...(values['catch-up'] !== undefined ? { catch_up: values['catch-up'] } : {}),
          ...(boolFlag(values, 'enabled') !== undefined
            ? { enabled: boolFlag(values, 'enabled') }
            : {}),
        };
        const reply =
          sub === 'create'
            ? await api('POST', `/v1/projects/${project}/schedules`, {
                name,
                cron: required(values, 'cron'),
                ...body,
              })
            : await api(
                'PATCH',
                `/v1/projects/${project}/schedules/${encodeURIComponent(name)}`,
                body,
              );
        print(reply.json);
        return 0;
      }
      case 'schedule delete': {
        const project = encodeURIComponent(required(values, 'project'));
        const name = encodeURIComponent(required(values, 'name'));
        await api('DELETE', `/v1/projects/${project}/schedules/${name}`);
        io.out(`deleted schedule ${required(values, 'name')}`);
        return 0;
      }
      case 'jobs': {
        const project = required(values, 'project');
        const limit = values.limit ? `?limit=${encodeURIComponent(values.limit)}` : '';
        const { jobs } = (
          await api('GET', `/v1/projects/${encodeURIComponent(project)}/jobs${limit}`)
        ).json;
        for (const job of jobs) {
          io.out(
            `#${job.number}\t${job.state}\t${job.trigger}\t${job.ref}\t${job.sha.slice(0, 12)}\t${job.id}`,
          );
        }
        return 0;
      }
      case 'job': {
        if (!sub) throw new UsageError('job needs a JOB_ID');
        const { job, tasks } = (await api('GET', `/v1/jobs/${encodeURIComponent(sub)}`)).json;
        io.out(`job #${job.number} ${job.state} (${job.trigger} ${job.ref} ${job.sha})`);
        if (job.page_url) io.out(`page: ${job.page_url}`);
        io.out(
          `${job.trusted ? 'trusted' : 'untrusted'}${job.trust_reason ? `: ${job.trust_reason}` : ''}`,
        );
        if (job.state === 'blocked')
          io.out(`waiting for approval: npm run ctl -- job approve ${job.id}`);
        if (job.error) io.out(job.error);
        for (const task of tasks) {
          // The job page's words for why a task is as it is ("allowed to
          // fail", "kept from the earlier job", its error or queue reason).
          const { note } = taskLines(task);
          io.out(
            `  ${task.state.padEnd(9)} ${task.name}  attempt ${task.attempt}/${task.max_attempts}${note ? `  ${note}` : ''}`,
          );
        }
        return 0;
      }
      case 'job approve': {
        if (!arg) throw new UsageError('job approve needs a JOB_ID');
        print((await api('POST', `/v1/jobs/${encodeURIComponent(arg)}/approve`)).json);
        return 0;
      }
      case 'cancel': {
        if (!sub) throw new UsageError('cancel needs a JOB_ID');
        print((await api('POST', `/v1/jobs/${encodeURIComponent(sub)}/cancel`)).json);
        return 0;
      }
      case 'rerun': {
        if (!sub) throw new UsageError('rerun needs a JOB_ID');
        const started = await api('POST', `/v1/jobs/${encodeURIComponent(sub)}/rerun`, {
          failed_only: values['failed-only'] ?? false,
        });
        print(started.json);
        io.out(`follow it: npm run ctl -- job ${started.json.job_id}`);
        return 0;
      }
      // Artifacts and caches (docs/artifacts.md).
      case 'artifacts': {
        if (!sub) throw new UsageError('artifacts needs a JOB_ID');
        const { artifacts } = (await api('GET', `/v1/jobs/${encodeURIComponent(sub)}/artifacts`))
          .json;
        for (const a of artifacts) {
          io.out(`${a.task_name}\t${a.path}\t${a.size} bytes\texpires ${a.expires_at}\t${a.id}`);
        }
        return 0;
      }
      case 'download': {
        const arg = sub;
        if (!arg) throw new UsageError('download needs an ARTIFACT_ID');
        // The redirect goes to the store's short-lived URL: the admin token stays here.
        const first = await doFetch(`${base}/v1/artifacts/${encodeURIComponent(arg)}`, {
          headers: { authorization: `Bearer ${adminToken(values, io.env)}` },
          redirect: 'manual',
        });
        const location = first.headers.get('location');
        if (first.status !== 302 || !location) {
          const text = await first.text();
          const message = (() => {
            try {
              return JSON.parse(text).error.message;
            } catch {
              return text || first.statusText;
            }
          })();
          throw new Error(`GET /v1/artifacts/${arg}: HTTP ${first.status}: ${message}`);
        }
        const res = await doFetch(new URL(location, base));
        if (!res.ok || !res.body) throw new Error(`downloading the artifact: HTTP ${res.status}`);
        const named = /filename\*=UTF-8''([^;]+)/.exec(
          res.headers.get('content-disposition') ?? '',
        );
        const file = values.file ?? basename(decodeURIComponent(named?.[1] ?? arg));
        await pipeline(
          Readable.fromWeb(res.body as import('node:stream/web').ReadableStream<Uint8Array>),
          createWriteStream(file),
        );
        io.out(`wrote ${file}`);
        return 0;
      }
      case 'caches': {
        const project = encodeURIComponent(required(values, 'project'));
        const { caches } = (await api('GET', `/v1/projects/${project}/caches`)).json;
        for (const c of caches) {
          io.out(`${c.key}\t${c.scope}\t${c.size} bytes\tlast used ${c.last_used_at}`);
        }
        return 0;
      }
      case 'cache delete': {
        const project = encodeURIComponent(required(values, 'project'));
        const key = required(values, 'name');
        const scope = values.scope ? `?scope=${encodeURIComponent(values.scope)}` : '';
        await api('DELETE', `/v1/projects/${project}/caches/${encodeURIComponent(key)}${scope}`);
        io.out(`deleted cache ${key}`);
        return 0;
      }
      case 'log': {
        if (!sub) throw new UsageError('log needs a TASK_ID');
        // Page by page (each at most 1 MiB), all from the attempt the first page read.
        let attempt = values.attempt;
        let offset = 0;
        let text = '';
        for (;;) {
          const query = new URLSearchParams({ offset: String(offset) });
          if (attempt) query.set('attempt', attempt);
          const page = await api('GET', `/v1/tasks/${encodeURIComponent(sub)}/log?${query}`);
          text += page.text;
          attempt = page.headers.get('x-log-attempt') ?? attempt;
          const end = Number(page.headers.get('x-log-end'));
          if (!(end > offset) || end >= Number(page.headers.get('x-log-size'))) break;
          offset = end;
        }
        io.out(text);
        return 0;
      }
      default:
        throw new UsageError(`unknown command "${positionals.join(' ')}"`);
    }
  } catch (err) {
    if (err instanceof UsageError) {
      io.out(err.showUsage ? `${err.message}\n\n${USAGE}` : err.message);
      return 2;
    }
    io.out(err instanceof Error ? err.message : String(err));
    return 1;
  }
}

// Runner pools (#51; docs/runner.md, "Runner pools"): `pool create|update|delete`, `pools`.
// Kept apart from the switch above for the CLI's rewrite (#48).
type Api = (
  method: string,
  path: string,
  body?: unknown,
) => Promise<{ status: number; json: { pool?: unknown; pools?: unknown } | null }>;

async function poolCommand(
  positionals: string[],
  values: ReturnType<typeof parse>['values'],
  api: Api,
  print: (value: unknown) => void,
): Promise<number> {
  const [command, sub, arg] = positionals;
  const list = (v: string) =>
    v
      .split(',')
      .map((x) => x.trim())
      .filter(Boolean);
  const fields = () => {
    if (values.projects !== undefined && values['all-projects']) {
      throw new UsageError('give --projects a,b or --all-projects, not both');
    }
    let settings: unknown;
    if (values.settings !== undefined) {
      try {
        settings = JSON.parse(values.settings);
      } catch {
        throw new UsageError('--settings must be a JSON object, e.g. \'{"idle_limit_s": 30}\'');
      }
    }
    const max = values.max === undefined ? undefined : Number(values.max);
    if (max !== undefined && !Number.isInteger(max))
      throw new UsageError('--max must be a whole number');
    return {
      ...(values.labels !== undefined ? { labels: list(values.labels) } : {}),
      ...(values.trust !== undefined ? { trust: values.trust } : {}),
      ...(values.projects !== undefined ? { projects: list(values.projects) } : {}),
      ...(values['all-projects'] ? { projects: '*' } : {}),
      ...(values.provider !== undefined ? { provider: values.provider } : {}),
      ...(max !== undefined ? { max } : {}),
      ...(settings !== undefined ? { settings } : {}),
    };
  };
  if (command === 'pools') {
    print((await api('GET', '/v1/pools')).json);
    return 0;
  }
  const name = () => encodeURIComponent(arg ?? required(values, 'name'));
  switch (sub) {
    case 'create':
      print(
        (await api('POST', '/v1/pools', { name: required(values, 'name'), ...fields() })).json
          ?.pool,
      );
      return 0;
    case 'update':
      print((await api('PATCH', `/v1/pools/${name()}`, fields())).json?.pool);
      return 0;
    case 'delete': {
      const n = name();
      await api('DELETE', `/v1/pools/${n}`);
      return 0;
    }
    default:
      throw new UsageError(`unknown command "${positionals.join(' ')}"`);
  }
}

/** `--input NAME=VALUE` flags as the inputs object, or undefined when none; a flag without `=` is a usage error. */
function inputPairs(pairs: string[] | undefined): Record<string, string> | undefined {
  if (!pairs || pairs.length === 0) return undefined;
  const out: Record<string, string> = {};
  for (const pair of pairs) {
    const eq = pair.indexOf('=');
    if (eq <= 0) throw new UsageError(`--input ${pair}: expected NAME=VALUE`, false);
    out[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  return out;
}

/** The ref a validate without --ref checks for: the current branch, or main, saying which. */
function currentRef(dir: string): { ref: string; why: string } {
  try {
    const branch = execFileSync('git', ['-C', dir, 'symbolic-ref', '--short', '-q', 'HEAD'], {
      stdio: ['ignore', 'pipe', 'ignore'],
      timeout: 10_000,
    })
      .toString()
      .trim();
    if (branch) return { ref: `refs/heads/${branch}`, why: 'the current branch' };
  } catch {
    // Not a repository, or a detached HEAD: assumed, and said so.
  }
  return { ref: 'refs/heads/main', why: 'assumed: no current branch here; give --ref' };
}

/**
 * `validate [FILE] [--ref REF]`: compiles the file as the server would for a
 * push of REF, with no server. Included files are read from the working tree,
 * their paths taken from the pipeline file's folder (the repository's root,
 * where the server finds .conductor.yml).
 */
async function validate(args: string[], values: { ref?: string }, io: CtlIo): Promise<number> {
  if (args.length > 1) throw new UsageError('validate takes one pipeline file');
  const cwd = io.cwd ?? process.cwd();
  const shown = args[0] ?? '.conductor.yml';
  const file = resolve(cwd, shown);
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new UsageError(
      code === 'ENOENT'
        ? `no pipeline file at ${shown}`
        : `cannot read ${shown}: ${(err as Error).message}`,
      false,
    );
  }
  const root = dirname(file);
  const given = values.ref;
  const { ref, why } = given
    ? { ref: given.startsWith('refs/') ? given : `refs/heads/${given}`, why: '' }
    : currentRef(root);
  const event = ref.startsWith('refs/tags/') ? 'tag' : 'push';
  const plan = await planPipeline(text, { ref, event }, async (path) => {
    try {
      return { text: await readFile(join(root, path), 'utf8') };
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      return {
        error:
          code === 'ENOENT'
            ? `${JSON.stringify(path)} does not exist in the working tree`
            : `${JSON.stringify(path)} cannot be read: ${(err as Error).message}`,
      };
    }
  });
  if ('issues' in plan) {
    // An included file's problems name it from the repository root; from
    // here, so that an editor opens it from these lines.
    const rel = isAbsolute(shown) ? root : relative(cwd, root);
    for (const issue of plan.issues) {
      const where = issue.file === undefined ? issue : { ...issue, file: join(rel, issue.file) };
      io.out(formatIssue(where, shown));
    }
    const n = plan.issues.length;
    io.out(
      `${shown}: ${n} problem${n === 1 ? '' : 's'}; a job would fail with ${n === 1 ? 'it' : 'them'}`,
    );
    return 1;
  }
  const { tasks, name } = plan.pipeline;
  const n = tasks.length;
  io.out(
    `${shown}: valid${name ? ` (${name})` : ''}; a push of ${ref}${why ? ` (${why})` : ''} runs ${n} task${n === 1 ? '' : 's'}${n ? ':' : ''}`,
  );
  const width = Math.min(48, Math.max(0, ...tasks.map((t) => t.name.length)));
  for (const task of tasks) {
    const notes = [
      task.needs.length > 0 ? `needs ${task.needs.join(', ')}` : '',
      task.allowFailure ? 'allowed to fail' : '',
      task.failFast && Object.keys(task.matrix).length > 0 ? 'fail fast' : '',
      task.services?.length ? `services ${task.services.map((s) => s.name).join(', ')}` : '',
      task.secrets.length > 0 ? `secrets ${task.secrets.join(', ')}` : '',
      task.labels.length > 0 ? `labels ${task.labels.join(', ')}` : '',
    ].filter(Boolean);
    io.out(`  ${task.name.padEnd(width)}${notes.length ? `  ${notes.join(' · ')}` : ''}`.trimEnd());
  }
  if (plan.leftOut.length > 0) {
    io.out(`left out for ${ref}:`);
    const w = Math.min(48, Math.max(...plan.leftOut.map((t) => t.name.length)));
    for (const task of plan.leftOut) io.out(`  ${task.name.padEnd(w)}  ${task.reason}`);
  }
  return 0;
}
