// The messages a newcomer meets (#33), each through the real route or the
// CLI: what they say, and that what they tell the user to do works when it
// is done to the letter.
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { test } from 'node:test';
import { type CtlIo, runCtl } from '../../cli/ctl.ts';
import { setQuiet } from '../../lib/log.ts';
import { giteaPush } from '../forge/fixtures/gitea.ts';
import { githubPush } from '../forge/fixtures/github.ts';
import {
  claimTask,
  complete,
  createWorker,
  getJob,
  type Json,
  pushToBranch,
  sendWebhook,
  startE2E,
  uploadLog,
  waitForJob,
} from './calls.ts';
import { pipeline, sha } from './payloads.ts';

const REPO = 'acme/messages';
const {
  fake,
  stack,
  projects: { project },
} = await startE2E(import.meta.filename, {
  projects: { project: { forge: 'github', id: 'messages', repo: REPO, cancel_superseded: false } },
});

/** Runs the CLI against the stack; `stdin` is what is piped into it. */
async function ctl(argv: string[], stdin?: string): Promise<{ code: number; out: string }> {
  const lines: string[] = [];
  const io: CtlIo = {
    out: (l) => lines.push(l),
    env: { CONDUCTOR_ADMIN_TOKEN: stack.adminToken },
    ...(stdin === undefined ? {} : { stdin: Readable.from([Buffer.from(stdin)]) }),
  };
  const code = await runCtl([...argv, '--url', stack.url], io);
  return { code, out: lines.join('\n') };
}

/** The arguments of an `npm run ctl -- ...` command in a message, as a shell would split them. */
function ctlArgs(message: string): string[] {
  const command = /npm run ctl -- ([^;\n]+)/.exec(message)?.[1];
  assert.ok(command, `a ctl command in: ${message}`);
  return command.trim().split(/\s+/);
}

/** The log lines written while `fn` runs (the stack runs in this process). */
async function logged(fn: () => Promise<unknown>): Promise<Json[]> {
  const lines: Json[] = [];
  const write = process.stderr.write;
  process.stderr.write = ((chunk: string | Uint8Array, ...rest: unknown[]) => {
    for (const line of String(chunk).split('\n')) {
      if (line.startsWith('{')) lines.push(JSON.parse(line));
    }
    return (write as (...a: unknown[]) => boolean).call(process.stderr, chunk, ...rest);
  }) as typeof process.stderr.write;
  setQuiet(false);
  try {
    await fn();
  } finally {
    process.stderr.write = write;
    setQuiet(true);
  }
  return lines;
}

test('a push for a repository with no project answers 404 with the command that creates one, logged at warn, and the command works', async () => {
  const commit = sha('unknown-repo');
  const payload = githubPush('me/Unknown_Repo', commit);
  let hook: Awaited<ReturnType<typeof sendWebhook>> | undefined;
  const lines = await logged(async () => {
    hook = await sendWebhook(stack, 'github', 'push', payload, { secret: 'not-known-yet' });
  });
  assert.equal(hook!.status, 404, hook!.text);
  const message = hook!.body.error.message as string;
  assert.equal(
    message,
    'no github project for me/Unknown_Repo; create one with: npm run ctl -- project create --id unknown-repo --repo me/Unknown_Repo --repo-url https://github.com/me/Unknown_Repo.git',
  );
  const warn = lines.find((l) => l.level === 'warn' && l.repo === 'me/Unknown_Repo');
  assert.ok(warn, `a warn line for the repository: ${JSON.stringify(lines)}`);
  assert.match(warn.create, /^npm run ctl -- project create --id unknown-repo /);

  // Done as it says, the next delivery (signed with the new secret) makes a job.
  const created = await ctl(ctlArgs(message));
  assert.equal(created.code, 0, created.out);
  const secret = /webhook secret \(shown once\): (\S+)/.exec(created.out)![1]!;
  fake.setFile('me/Unknown_Repo', commit, pipeline('unknown', '  a:\n    script: [x]\n'));
  const again = await sendWebhook(stack, 'github', 'push', payload, { secret });
  assert.equal(again.status, 202, again.text);
});

test("a Gitea push for a repository with no project names Gitea's URL and --forge gitea in the command", async () => {
  const hook = await sendWebhook(stack, 'gitea', 'push', giteaPush('me/nothing', sha('g')), {
    secret: 'x',
  });
  assert.equal(hook.status, 404, hook.text);
  assert.match(
    hook.body.error.message,
    /; create one with: npm run ctl -- project create --id nothing --forge gitea --repo me\/nothing --repo-url https:\/\/\S+\/me\/nothing\.git --forge-url https:\/\/[^/\s]+$/,
  );
});

test("a form-encoded webhook answers 400 saying to set the webhook's content type to application/json", async () => {
  const json = JSON.stringify(githubPush(REPO, sha('form')));
  const body = `payload=${encodeURIComponent(json)}`;
  const hook = await stack.call('POST', '/v1/webhooks/github', {
    raw: body,
    headers: {
      'content-type': 'application/x-www-form-urlencoded',
      'x-github-event': 'push',
      'x-github-delivery': 'form-1',
    },
  });
  assert.equal(hook.status, 400, hook.text);
  assert.equal(
    hook.body.error.message,
    `the body is form-encoded (application/x-www-form-urlencoded), not JSON: set the webhook's "Content type" to application/json (the repository's Settings, Webhooks)`,
  );
  // Gitea names its own setting.
  const gitea = await stack.call('POST', '/v1/webhooks/gitea', {
    raw: body,
    headers: {
      'content-type': 'application/x-www-form-urlencoded',
      'x-gitea-event': 'push',
      'x-gitea-delivery': 'form-2',
    },
  });
  assert.equal(gitea.status, 400, gitea.text);
  assert.match(gitea.body.error.message, /"POST Content Type" to application\/json/);
  // Broken JSON sent as JSON is not the setting's fault, and does not say so.
  const broken = await sendWebhook(stack, 'github', 'push', null, { raw: '{"ref":' });
  assert.equal(broken.status, 400);
  assert.equal(broken.body.error.message, 'the body is not valid JSON');
});

test('a secret the project lacks fails the task with the command that sets it, and that command (value on stdin) fixes the next run', async () => {
  const label = 'secret-msg';
  const commit = sha(label);
  fake.setFile(
    REPO,
    commit,
    pipeline(
      label,
      '  deploy:\n    secrets: [NPM_TOKEN, DEPLOY_KEY]\n    script: [deploy]\n  docs:\n    secrets: [DOCS_TOKEN]\n    script: [docs]\n',
    ),
  );
  const jobId = await pushToBranch(stack, { repo: REPO, secret: project.secret }, commit, label);
  const { tasks } = await waitForJob(stack, jobId, (v) => v.job.state === 'failed');
  const byName = Object.fromEntries(tasks.map((t: Json) => [t.name, t]));
  assert.equal(
    byName.docs.error,
    'secret DOCS_TOKEN is not set for project messages; set it with: npm run ctl -- secret set --project messages --name DOCS_TOKEN',
  );
  assert.equal(
    byName.deploy.error,
    'secrets DEPLOY_KEY, NPM_TOKEN are not set for project messages; set each with: npm run ctl -- secret set --project messages --name DEPLOY_KEY; npm run ctl -- secret set --project messages --name NPM_TOKEN',
  );
  for (const command of byName.deploy.error.split('; ').slice(1)) {
    const set = await ctl(ctlArgs(command), 'a-long-enough-value\n');
    assert.equal(set.code, 0, set.out);
  }
  const set = await ctl(ctlArgs(byName.docs.error), 'docs-token-value\n');
  assert.equal(set.code, 0, set.out);

  const rerun = await ctl(['rerun', jobId, '--json']);
  assert.equal(rerun.code, 0, rerun.out);
  const again = JSON.parse(rerun.out).job_id;
  const view = await waitForJob(stack, again, (v) => v.job.state === 'running');
  assert.deepEqual(
    view.tasks.map((t: Json) => [t.name, t.state, t.error]),
    [
      ['deploy', 'queued', null],
      ['docs', 'queued', null],
    ],
  );
  // The value reached the runner as piped in, less its final line feed.
  const { token } = await createWorker(stack, [label]);
  const claimed = await claimTask(stack, token);
  assert.equal(
    claimed.secrets[claimed.name === 'docs' ? 'DOCS_TOKEN' : 'NPM_TOKEN'],
    claimed.name === 'docs' ? 'docs-token-value' : 'a-long-enough-value',
  );
  await ctl(['cancel', again]);
});

test("a failed-only rerun's kept task shows the log it was kept from, through the API and ctl log; ctl job and the page both say 'allowed to fail' and 'kept from the earlier job'", async () => {
  const label = 'kept-log';
  const commit = sha(label);
  fake.setFile(
    REPO,
    commit,
    pipeline(
      label,
      '  build:\n    script: [make]\n  lint:\n    allow_failure: true\n    script: [lint]\n  test:\n    needs: [build]\n    retries: 0\n    script: [make test]\n',
    ),
  );
  const jobId = await pushToBranch(stack, { repo: REPO, secret: project.secret }, commit, label);
  await waitForJob(stack, jobId);
  const { token } = await createWorker(stack, [label]);
  const outcomes: Record<string, { log: string; outcome: string; exit_code: number }> = {
    build: { log: 'compiled 12 files\n', outcome: 'success', exit_code: 0 },
    lint: { log: 'lint: 3 warnings\n', outcome: 'failed', exit_code: 1 },
    test: { log: 'test: 1 failed\n', outcome: 'failed', exit_code: 1 },
  };
  for (let i = 0; i < 3; i++) {
    const task = await claimTask(stack, token);
    const plan = outcomes[task.name]!;
    const up = await uploadLog(stack, token, task.id, {
      lease_id: task.lease_id,
      offset: 0,
      data: plan.log,
    });
    assert.equal(up.status, 200, up.text);
    const done = await complete(stack, token, task.id, {
      lease_id: task.lease_id,
      outcome: plan.outcome,
      exit_code: plan.exit_code,
    });
    assert.equal(done.status, 200, done.text);
  }
  const first = await waitForJob(stack, jobId, (v) => v.job.state === 'failed');

  // The first job as ctl shows it, and as its page (by the link ctl prints) does.
  const shown = await ctl(['job', jobId]);
  assert.equal(shown.code, 0, shown.out);
  assert.match(shown.out, /^lint\s+failed\s+\S*\s+1\/3\s+[0-9a-f-]{36}\s+allowed to fail$/m);
  const pageUrl = /^page: (\S+)$/m.exec(shown.out)?.[1];
  assert.equal(pageUrl, first.job.page_url);
  assert.ok(pageUrl?.startsWith(`${stack.url}/jobs/${jobId}?sig=`), pageUrl);
  const page = await fetch(pageUrl!, { redirect: 'manual' });
  assert.equal(page.status, 200, 'the link opens the page without signing in');
  const html = await page.text();
  assert.match(html, /data-job-state="failed"/);
  assert.match(html, /allowed to fail/);

  const rerun = await ctl(['rerun', jobId, '--failed-only']);
  assert.equal(rerun.code, 0, rerun.out);
  assert.match(rerun.out, /^follow it: npm run ctl -- job messages#\d+$/m);
  const again = /^started messages#\d+ \(([0-9a-f-]{36})\)$/m.exec(rerun.out)![1]!;
  const view = await getJob(stack, again);
  const kept = view.tasks.find((t: Json) => t.name === 'build');
  const source = first.tasks.find((t: Json) => t.name === 'build');
  assert.equal(kept.state, 'success');
  assert.equal(kept.copied_from, source.id);

  const log = await stack.call('GET', `/v1/tasks/${kept.id}/log`, { token: stack.adminToken });
  assert.equal(log.status, 200, log.text);
  assert.equal(log.text, 'compiled 12 files\n');
  assert.equal(log.headers.get('x-log-copied-from'), source.id);
  assert.equal(log.headers.get('x-log-attempt'), '1');
  const byAttempt = await stack.call('GET', `/v1/tasks/${kept.id}/log?attempt=1`, {
    token: stack.adminToken,
  });
  assert.equal(byAttempt.text, 'compiled 12 files\n');

  const printed = await ctl(['log', kept.id]);
  assert.equal(printed.code, 0, printed.out);
  assert.equal(printed.out, 'compiled 12 files\n');

  const rerunShown = await ctl(['job', again]);
  assert.match(
    rerunShown.out,
    /^build\s+success\s+\S*\s+1\/3\s+[0-9a-f-]{36}\s+kept from the earlier job$/m,
  );
  await ctl(['cancel', again]);
});

test('a kept task whose earlier job was deleted says where its log went', async () => {
  const label = 'kept-gone';
  const commit = sha(label);
  fake.setFile(
    REPO,
    commit,
    pipeline(label, '  a:\n    script: [a]\n  b:\n    retries: 0\n    script: [b]\n'),
  );
  const jobId = await pushToBranch(stack, { repo: REPO, secret: project.secret }, commit, label);
  await waitForJob(stack, jobId);
  const { token } = await createWorker(stack, [label]);
  for (let i = 0; i < 2; i++) {
    const task = await claimTask(stack, token);
    await complete(stack, token, task.id, {
      lease_id: task.lease_id,
      outcome: task.name === 'a' ? 'success' : 'failed',
      exit_code: task.name === 'a' ? 0 : 1,
    });
  }
  await waitForJob(stack, jobId, (v) => v.job.state === 'failed');
  const rerun = await stack.call('POST', `/v1/jobs/${jobId}/rerun`, {
    token: stack.adminToken,
    body: { failed_only: true },
  });
  assert.equal(rerun.status, 202, rerun.text);
  // What retention does to a job past CONDUCTOR_RETENTION_JOB_DAYS.
  await stack.context.pool.query('delete from jobs where id = $1', [jobId]);
  const view = await getJob(stack, rerun.body.job_id);
  const kept = view.tasks.find((t: Json) => t.name === 'a');
  const log = await stack.call('GET', `/v1/tasks/${kept.id}/log`, { token: stack.adminToken });
  assert.equal(log.status, 404);
  assert.match(
    log.body.error.message,
    /was kept by a failed-only rerun from an earlier job that has since been deleted; its log was deleted with that job$/,
  );
});
