// The admin CLI (`npm run ctl -- <command>`): creates projects, workers and
// secrets, sends a signed test webhook, lists jobs and shows one, all through
// the HTTP API, like any other client.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { sendPush } from './push.ts';

export const USAGE = `usage: npm run ctl -- <command> [options]

  projects                                  list projects
  project create --id ID --repo OWNER/NAME --repo-url URL|PATH
                 [--forge github|gitea] [--forge-url URL] [--forge-token T] [--name N]
                 [--fork-pull-requests approve|run|ignore] [--visibility private|public]
                 [--bot-pull-requests untrusted|trusted]
                                            create a project; prints its webhook secret once
  project update ID [--name N] [--repo-url URL|PATH] [--forge-url URL] [--forge-token T]
                 [--fork-pull-requests approve|run|ignore] [--visibility private|public]
                 [--bot-pull-requests untrusted|trusted]
                                            change the settings given
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
  secret set --project ID --name NAME --value VALUE
  secrets --project ID                      list secret names
  webhook push --project ID --secret WEBHOOK_SECRET --sha SHA [--ref refs/heads/main]
                                            sign and send a push webhook as the forge would
  trigger --project ID --sha SHA [--ref main]
                                            start a job by hand
  jobs --project ID [--limit N]             list a project's jobs, newest first
  job JOB_ID                                show a job and its tasks
  job approve JOB_ID                        let a blocked (untrusted) job run, still untrusted
  cancel JOB_ID                             cancel a job (a blocked one is declined)
  log TASK_ID [--attempt N]                 print a task's log

  --url URL      the control plane (default http://127.0.0.1:$PORT, PORT defaulting to 8080)
  --token TOKEN  the admin token (default $CONDUCTOR_ADMIN_TOKEN, or the one npm start
                 keeps in $CONDUCTOR_DATA_DIR/admin-token)`;

export interface CtlIo {
  out: (line: string) => void;
  env: NodeJS.ProcessEnv;
  fetch?: typeof fetch;
}

class UsageError extends Error {}

function required(values: Record<string, unknown>, name: string): string {
  const v = values[name];
  if (typeof v !== 'string' || v === '') throw new UsageError(`--${name} is required`);
  return v;
}

function adminToken(values: Record<string, unknown>, env: NodeJS.ProcessEnv): string {
  if (typeof values.token === 'string') return values.token;
  if (env.CONDUCTOR_ADMIN_TOKEN) return env.CONDUCTOR_ADMIN_TOKEN;
  const file = join(env.CONDUCTOR_DATA_DIR || '.conductor', 'admin-token');
  if (existsSync(file)) return readFileSync(file, 'utf8').trim();
  throw new UsageError(
    'no admin token: pass --token, set CONDUCTOR_ADMIN_TOKEN, or run npm start first',
  );
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
      id: { type: 'string' },
      name: { type: 'string' },
      repo: { type: 'string' },
      'repo-url': { type: 'string' },
      forge: { type: 'string' },
      'forge-url': { type: 'string' },
      'forge-token': { type: 'string' },
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
      sha: { type: 'string' },
      ref: { type: 'string' },
      limit: { type: 'string' },
      attempt: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
}

async function run({ values, positionals }: ReturnType<typeof parse>, io: CtlIo): Promise<number> {
  const [command, sub, arg] = positionals;
  if (values.help || !command) {
    io.out(USAGE);
    return command ? 0 : 2;
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
    switch (
      `${command}${sub && ['create', 'update', 'show', 'set', 'push', 'approve', 'revoke'].includes(sub) ? ` ${sub}` : ''}`
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
          ...(values['forge-token'] ? { forge_token: values['forge-token'] } : {}),
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
        const changes = Object.fromEntries(
          (
            [
              ['name', 'name'],
              ['repo-url', 'repo_url'],
              ['forge-url', 'forge_url'],
              ['forge-token', 'forge_token'],
              ['fork-pull-requests', 'fork_pull_requests'],
              ['bot-pull-requests', 'bot_pull_requests'],
              ['visibility', 'visibility'],
            ] as const
          )
            .filter(([flag]) => values[flag] !== undefined)
            .map(([flag, field]) => [field, values[flag]]),
        );
        if (Object.keys(changes).length === 0) {
          throw new UsageError('project update needs at least one setting to change');
        }
        print((await api('PATCH', `/v1/projects/${encodeURIComponent(id)}`, changes)).json);
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
      case 'secret set': {
        const project = required(values, 'project');
        const name = required(values, 'name');
        const set = await api(
          'PUT',
          `/v1/projects/${encodeURIComponent(project)}/secrets/${encodeURIComponent(name)}`,
          {
            value: required(values, 'value'),
          },
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
          secret: required(values, 'secret'),
          message: 'sent by npm run ctl',
          fetch: doFetch,
        });
        io.out(`HTTP ${res.status} ${res.text}`);
        return res.status >= 200 && res.status < 300 ? 0 : 1;
      }
      case 'trigger': {
        const project = required(values, 'project');
        print(
          (
            await api('POST', `/v1/projects/${encodeURIComponent(project)}/jobs`, {
              ref: values.ref ?? 'main',
              sha: required(values, 'sha'),
            })
          ).json,
        );
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
        io.out(
          `${job.trusted ? 'trusted' : 'untrusted'}${job.trust_reason ? `: ${job.trust_reason}` : ''}`,
        );
        if (job.state === 'blocked')
          io.out(`waiting for approval: npm run ctl -- job approve ${job.id}`);
        if (job.error) io.out(job.error);
        for (const task of tasks) {
          const why = task.error ?? task.queue_reason;
          io.out(
            `  ${task.state.padEnd(9)} ${task.name}  attempt ${task.attempt}/${task.max_attempts}${why ? `  ${why}` : ''}`,
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
      io.out(`${err.message}\n\n${USAGE}`);
      return 2;
    }
    io.out(err instanceof Error ? err.message : String(err));
    return 1;
  }
}
