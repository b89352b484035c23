// `npm run demo`: the whole system in one command. A local stack on a fresh
// embedded PostgreSQL, a temporary git repository with a sample pipeline, a
// project and two workers, a signed GitHub-style push, two runners, a live line
// for each task state change, and a table at the end.
import { execFileSync } from 'node:child_process';
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setQuiet } from '../lib/log.ts';
import { signJobLink } from '../lib/pages/access.ts';
import { type Runner, startRunner } from '../runner/index.ts';
import { tempDirForCluster } from './postgres.ts';
import { sendPush } from './push.ts';
import { startLocalStack } from './stack.ts';

export const DEMO_PIPELINE = `version: 1
name: demo

tasks:
  build:
    script:
      - echo "building $CONDUCTOR_SHA"
      - echo "version=1.0.$CONDUCTOR_ATTEMPT" >> "$CONDUCTOR_OUTPUT"
    outputs: [version]

  test:
    needs: [build]
    matrix:
      node: [20, 22]
    script:
      - echo "testing version $CONDUCTOR_NEEDS_BUILD_VERSION on node $CONDUCTOR_MATRIX_NODE"
      - sleep 1

  lint:
    allow_failure: true
    script:
      - echo "lint found a problem (this task may fail)"
      - exit 3

  package:
    needs: [build, test, lint]
    secrets: [DEPLOY_TOKEN]
    script:
      - echo "packaging $CONDUCTOR_NEEDS_BUILD_VERSION with token $DEPLOY_TOKEN"
`;

const SECRET_VALUE = 'demo-deploy-token-1234';

export interface DemoResult {
  jobState: string;
  tasks: { name: string; state: string; attempt: number; duration_s: number | null }[];
  packageLog: string;
  /** The job's page, by its signed link. */
  pageUrl: string;
}

/** Runs the demo, printing as it goes; answers what happened. */
export async function runDemo(
  out: (line: string) => void,
  /** `keep`: after the table, the stack and runners stay up until it resolves (Ctrl-C). */
  opts: { timeoutMs?: number; keep?: () => Promise<void> } = {},
): Promise<DemoResult> {
  const started = Date.now();
  const deadline = started + (opts.timeoutMs ?? 120_000);
  // As root too, the throwaway cluster stays in here (see tempDirForCluster).
  const scratch = await tempDirForCluster('conductor-demo-');
  setQuiet(true);
  const runners: Runner[] = [];
  let stack: Awaited<ReturnType<typeof startLocalStack>> | undefined;
  try {
    // A repository with the sample pipeline, as a developer's checkout.
    const repo = join(scratch, 'repo');
    const git = (...args: string[]) =>
      execFileSync(
        'git',
        ['-c', 'user.name=demo', '-c', 'user.email=demo@example.invalid', ...args],
        {
          cwd: repo,
        },
      )
        .toString()
        .trim();
    execFileSync('git', ['init', '-q', '-b', 'main', repo]);
    await writeFile(join(repo, '.conductor.yml'), DEMO_PIPELINE);
    await writeFile(join(repo, 'README.md'), '# demo\n');
    git('add', '.');
    git('commit', '-q', '-m', 'a pipeline');
    const sha = git('rev-parse', 'HEAD');
    out(`repository   ${repo} at ${sha.slice(0, 12)}`);

    stack = await startLocalStack(
      { ...process.env, DATABASE_URL: '', PORT: '0', CONDUCTOR_DATA_DIR: join(scratch, 'data') },
      { sweep: true, ephemeral: true },
    );
    out(`control plane ${stack.url} (${stack.database})`);
    const { url, adminToken } = stack;
    const api = async (method: string, path: string, body?: unknown) => {
      const res = await fetch(`${url}${path}`, {
        method,
        headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await res.text();
      if (!res.ok) throw new Error(`${method} ${path}: HTTP ${res.status} ${text}`);
      return text ? JSON.parse(text) : null;
    };

    const project = await api('POST', '/v1/projects', {
      id: 'demo',
      name: 'Demo',
      forge: 'github',
      repo: 'example/demo',
      repo_url: repo,
    });
    await api('PUT', '/v1/projects/demo/secrets/DEPLOY_TOKEN', { value: SECRET_VALUE });
    const workers = [
      await api('POST', '/v1/workers', { name: 'runner-1', labels: [] }),
      await api('POST', '/v1/workers', { name: 'runner-2', labels: [] }),
    ];
    out('project      demo, with secret DEPLOY_TOKEN and two workers');

    const hook = await sendPush({
      url,
      forge: 'github',
      repo: 'example/demo',
      repoUrl: repo,
      sha,
      ref: 'refs/heads/main',
      secret: project.webhook_secret,
      message: 'a pipeline',
    });
    if (hook.status !== 202)
      throw new Error(`the webhook was answered ${hook.status}: ${hook.text}`);
    const accepted = JSON.parse(hook.text) as { job_id: string; number: number };
    out(`webhook      push to main answered 202: job #${accepted.number}`);
    out('');

    // Live lines: every change of a task's state. A runner says at once when it
    // starts a task (a quick task may start and finish between two looks at
    // the job); the job view shows the rest.
    const seen = new Map<string, string>();
    const line = (name: string, state: string, detail: string) => {
      const at = ((Date.now() - started) / 1000).toFixed(1).padStart(5);
      out(`${at}s  ${name.padEnd(22)} ${state}${detail}`);
    };
    for (const [i, worker] of workers.entries()) {
      runners.push(
        await startRunner({
          url,
          token: worker.token,
          concurrency: 2,
          workdir: join(scratch, `runner-${i + 1}`),
          pollMinMs: 100,
          pollMaxMs: 500,
          log: () => {},
          onEvent: (event) => {
            if (event.type !== 'task-started') return;
            const key = `running/${event.attempt}`;
            if (seen.get(event.name) === key) return;
            seen.set(event.name, key);
            line(event.name, 'running', `  (attempt ${event.attempt}, runner-${i + 1})`);
          },
        }),
      );
    }

    // biome-ignore lint/suspicious/noExplicitAny: the API's JSON, read for display
    let view: { job: { state: string; error: string | null }; tasks: any[] } | undefined;
    while (Date.now() < deadline) {
      view = await api('GET', `/v1/jobs/${accepted.job_id}`);
      for (const task of view!.tasks) {
        const key = `${task.state}/${task.attempt}`;
        if (seen.get(task.name) !== key) {
          seen.set(task.name, key);
          line(
            task.name,
            task.state,
            task.error
              ? `  (${task.error})`
              : task.state === 'running'
                ? `  (attempt ${task.attempt})`
                : '',
          );
        }
      }
      if (['success', 'failed', 'cancelled'].includes(view!.job.state)) break;
      await new Promise((r) => setTimeout(r, 150));
    }
    if (!view) throw new Error('the job was never shown');

    const tasks = view.tasks.map((t) => ({
      name: t.name as string,
      state: t.state as string,
      attempt: t.attempt as number,
      duration_s:
        t.started_at && t.finished_at
          ? (new Date(t.finished_at).getTime() - new Date(t.started_at).getTime()) / 1000
          : null,
    }));
    out('');
    out(`${'task'.padEnd(22)} ${'state'.padEnd(9)} attempt  duration`);
    for (const t of tasks) {
      out(
        `${t.name.padEnd(22)} ${t.state.padEnd(9)} ${String(t.attempt).padStart(7)}  ${t.duration_s === null ? '-' : `${t.duration_s.toFixed(1)}s`}`,
      );
    }
    const pkg = view.tasks.find((t) => t.name === 'package');
    const packageLog = pkg
      ? await (
          await fetch(`${url}/v1/tasks/${pkg.id}/log`, {
            headers: { authorization: `Bearer ${adminToken}` },
          })
        ).text()
      : '';
    // The signed link a commit status would carry: it opens without signing in.
    const pageUrl = `${url}/jobs/${accepted.job_id}?sig=${signJobLink(stack.context.keyring, accepted.job_id)}`;
    // The link opens only while the stack is up: printed with --keep alone.
    out('');
    if (opts.keep) out(`job page     ${pageUrl}`);
    else out('job page     npm run demo -- --keep keeps the stack up and prints it (until Ctrl-C)');
    out('');
    out('the package task logged (its secret masked):');
    for (const line of packageLog.trimEnd().split('\n')) out(`  | ${line}`);
    out('');
    out(
      `job #${accepted.number}: ${view.job.state}${view.job.state === 'pending' || view.job.state === 'running' ? ' (timed out waiting)' : ''}`,
    );
    if (opts.keep) {
      out('');
      out(
        `kept up: ${url} (sign in at ${url}/login with the admin token ${adminToken}); Ctrl-C stops it`,
      );
      await opts.keep();
    }
    return { jobState: view.job.state, tasks, packageLog, pageUrl };
  } finally {
    await Promise.all(runners.map((r) => r.stop({ graceMs: 2_000 })));
    await stack?.stop();
    await rm(scratch, { recursive: true, force: true });
  }
}
