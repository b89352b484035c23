// The `conductor` CLI through the local stack, as a user types it: jobs by
// number, logs of one task or of the failed ones (and followed while the task
// runs), unblock with fields, secret delete, --json on every command (parsed:
// one document each), and the errors that say what to do.
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { after, test } from 'node:test';
import { runCli } from '../../cli/main.ts';
import {
  claimTask,
  complete,
  createWorker,
  type Json,
  pushToBranch,
  startE2E,
  uploadLog,
  waitForJob,
} from './calls.ts';
import { pipeline, sha } from './payloads.ts';

const REPO = 'acme/cli-e2e';
const {
  fake,
  stack,
  projects: { project },
} = await startE2E(import.meta.filename, {
  projects: { project: { forge: 'github', id: 'mine', repo: REPO, cancel_superseded: false } },
});

const home = await mkdtemp(join(tmpdir(), 'conductor-cli-'));
after(() => rm(home, { recursive: true, force: true }));

/** `conductor ARGS` with the admin token in CONDUCTOR_ADMIN_TOKEN and the URL in CONDUCTOR_URL. */
async function conductor(
  args: string[],
  opts: { env?: NodeJS.ProcessEnv; stdin?: string; sleep?: (ms: number) => Promise<void> } = {},
) {
  const lines: string[] = [];
  const code = await runCli(args, {
    out: (l) => lines.push(l),
    env: opts.env ?? { CONDUCTOR_URL: stack.url, CONDUCTOR_ADMIN_TOKEN: stack.adminToken },
    cwd: home,
    ...(opts.stdin === undefined ? {} : { stdin: Readable.from([Buffer.from(opts.stdin)]) }),
    ...(opts.sleep ? { sleep: opts.sleep } : {}),
  });
  return { code, out: lines.join('\n') };
}

/** The same with --json: the one document it printed. */
async function json(args: string[]): Promise<Json> {
  const res = await conductor([...args, '--json']);
  assert.equal(res.code, 0, res.out);
  return JSON.parse(res.out);
}

const label = 'cli-e2e';
const { token } = await createWorker(stack, [label]);

/** Pushes `tasks` to a branch and waits for the job to run; answers its id and number. */
async function pushed(branch: string, tasks: string): Promise<{ id: string; number: number }> {
  const commit = sha(branch);
  fake.setFile(REPO, commit, pipeline(label, tasks));
  const id = await pushToBranch(stack, { repo: REPO, secret: project.secret }, commit, branch);
  const view = await waitForJob(stack, id);
  return { id, number: view.job.number };
}

/** Claims the next task, writes `log` and ends it with `outcome`. */
async function runTask(log: string, outcome: 'success' | 'failed') {
  const task = await claimTask(stack, token, { labels: [label] });
  const up = await uploadLog(stack, token, task.id, {
    lease_id: task.lease_id,
    offset: 0,
    data: log,
  });
  assert.equal(up.status, 200, up.text);
  const done = await complete(stack, token, task.id, {
    lease_id: task.lease_id,
    outcome,
    exit_code: outcome === 'success' ? 0 : 1,
  });
  assert.equal(done.status, 200, done.text);
  return task;
}

test('a job by PROJECT#NUMBER: its tasks with states and ids; logs --task prints one task, no --task the failed ones', async () => {
  const job = await pushed(
    'logs',
    '  build:\n    script: [make]\n  test:\n    needs: [build]\n    script: [make test]\n',
  );
  await runTask('compiling\ncompiled 3 files\n', 'success');
  await runTask('1 test failed: parses dates\n', 'failed');
  await waitForJob(stack, job.id, (v) => v.job.state === 'failed');

  const shown = await conductor(['job', `mine#${job.number}`]);
  assert.equal(shown.code, 0, shown.out);
  assert.match(
    shown.out,
    new RegExp(`^job mine#${job.number} failed \\(push refs/heads/logs `, 'm'),
  );
  assert.match(shown.out, /^TASK\s+STATE\s+DURATION\s+ATTEMPT\s+ID/m);
  assert.match(shown.out, /^build\s+success\s+\d+s\s+1\/3\s+[0-9a-f-]{36}/m);
  assert.match(shown.out, /^test\s+failed\s+\d+s\s+1\/3\s+[0-9a-f-]{36}/m);
  // The same job by --project and number, and by id.
  assert.equal((await conductor(['job', String(job.number), '--project', 'mine'])).out, shown.out);
  assert.equal((await conductor(['job', job.id])).out, shown.out);

  const one = await conductor(['logs', `mine#${job.number}`, '--task', 'build']);
  assert.equal(one.code, 0, one.out);
  assert.equal(one.out, 'compiling\ncompiled 3 files');
  const failed = await conductor(['logs', `mine#${job.number}`]);
  assert.equal(failed.out, '==> test (failed) <==\n1 test failed: parses dates');
  const asJson = await json(['logs', `mine#${job.number}`, '--task', 'test']);
  assert.deepEqual(
    asJson.tasks.map((t: Json) => [t.name, t.state, t.log]),
    [['test', 'failed', '1 test failed: parses dates\n']],
  );

  const nope = await conductor(['logs', `mine#${job.number}`, '--task', 'deploy']);
  assert.equal(nope.code, 1);
  assert.equal(nope.out, `mine#${job.number} has no task deploy; its tasks: build, test`);
  const noJob = await conductor(['job', 'mine#999']);
  assert.equal(noJob.code, 1);
  assert.equal(noJob.out, 'mine has no job #999');
  const bare = await conductor(['job', '7']);
  assert.equal(bare.code, 2);
  assert.match(bare.out, /give it as PROJECT#7, or with --project/);
});

test('logs --follow prints a running task as its log grows, until it ends', async () => {
  const job = await pushed('follow', '  slow:\n    script: [sleep]\n');
  const task = await claimTask(stack, token, { labels: [label] });
  const write = (offset: number, data: string) =>
    uploadLog(stack, token, task.id, { lease_id: task.lease_id, offset, data });
  assert.equal((await write(0, 'first line\nsecond')).status, 200);
  let polls = 0;
  // Each pause of the follow is a step of the task: more log, then its end.
  const sleep = async () => {
    polls++;
    if (polls === 1) assert.equal((await write(17, ' half\nthird line\n')).status, 200);
    if (polls === 2) {
      const done = await complete(stack, token, task.id, {
        lease_id: task.lease_id,
        outcome: 'success',
        exit_code: 0,
      });
      assert.equal(done.status, 200, done.text);
    }
  };
  const followed = await conductor(['logs', `mine#${job.number}`, '--task', 'slow', '--follow'], {
    sleep,
  });
  assert.equal(followed.code, 0, followed.out);
  // Whole lines only: "second" waited for the rest of its line.
  assert.equal(followed.out, 'first line\nsecond half\nthird line');
  assert.equal(polls, 2);
});

test('unblock lets a block step go on with its fields; a bad field is the API 400 naming it', async () => {
  const job = await pushed(
    'block',
    `  approve:
    block:
      prompt: "Ship it?"
      fields:
        - {name: region, type: select, options: [eu, us]}
  ship:
    needs: [approve]
    script: [ship]
`,
  );
  await waitForJob(stack, job.id, (v) => v.tasks.some((t: Json) => t.state === 'blocked'));
  const shown = await conductor(['job', `mine#${job.number}`]);
  assert.match(
    shown.out,
    new RegExp(`^unblock it: conductor unblock mine#${job.number} --task 'approve'$`, 'm'),
  );
  const bad = await conductor([
    'unblock',
    `mine#${job.number}`,
    '--task',
    'approve',
    '--field',
    'region=mars',
  ]);
  assert.equal(bad.code, 1);
  assert.match(bad.out, /HTTP 400: fields\.region: must be one of eu, us/);
  const ok = await conductor([
    'unblock',
    `mine#${job.number}`,
    '--task',
    'approve',
    '--field',
    'region=eu',
  ]);
  assert.equal(ok.code, 0, ok.out);
  assert.equal(ok.out, `unblocked approve of mine#${job.number}`);
  const view = await waitForJob(stack, job.id, (v) =>
    v.tasks.some((t: Json) => t.name === 'ship' && t.state === 'queued'),
  );
  const approve = view.tasks.find((t: Json) => t.name === 'approve');
  assert.equal(approve.state, 'success');
  await conductor(['cancel', `mine#${job.number}`]);
});

test('--json prints one document, the API answer, on every command', async () => {
  await writeFile(join(home, 'admin'), `${stack.adminToken}\n`);
  const projects = await json(['projects']);
  assert.ok(projects.projects.some((p: Json) => p.id === 'mine'));
  const created = await json([
    'project',
    'create',
    '--id',
    'two',
    '--repo',
    'acme/two',
    '--repo-url',
    'https://github.com/acme/two.git',
  ]);
  assert.equal(created.project.id, 'two');
  assert.match(created.webhook_secret, /^[0-9a-f]{48}$/);
  assert.equal((await json(['project', 'show', 'two'])).project.repo, 'acme/two');
  assert.equal((await json(['project', 'update', 'two', '--name', 'Two'])).project.name, 'Two');
  const worker = await json(['worker', 'create', '--name', 'json-worker', '--labels', 'x']);
  assert.match(worker.token, /^cw_/);
  assert.ok((await json(['workers'])).workers.some((w: Json) => w.name === 'json-worker'));
  assert.equal((await json(['worker', 'revoke', 'json-worker'])).revoked, worker.worker.id);

  const set = await conductor(['secret', 'set', '--project', 'two', '--name', 'TOKEN', '--json'], {
    stdin: 'v\n',
  });
  assert.equal(set.code, 0, set.out);
  JSON.parse(set.out);
  assert.deepEqual(
    (await json(['secrets', '--project', 'two'])).secrets.map((s: Json) => s.name),
    ['TOKEN'],
  );
  assert.deepEqual(await json(['secret', 'delete', '--project', 'two', '--name', 'TOKEN']), {
    deleted: 'TOKEN',
    project: 'two',
  });
  assert.deepEqual((await json(['secrets', '--project', 'two'])).secrets, []);
  const gone = await conductor(['secret', 'delete', '--project', 'two', '--name', 'TOKEN']);
  assert.equal(gone.code, 1);
  assert.match(gone.out, /HTTP 404/);

  const schedule = await json([
    'schedule',
    'create',
    '--project',
    'mine',
    '--name',
    'n',
    '--cron',
    '@daily',
  ]);
  assert.equal(schedule.schedule.name, 'n');
  assert.equal(
    (await json(['schedule', 'update', '--project', 'mine', '--name', 'n', '--enabled', 'false']))
      .schedule.enabled,
    false,
  );
  assert.equal((await json(['schedules', '--project', 'mine'])).schedules.length, 1);
  assert.deepEqual(await json(['schedule', 'delete', '--project', 'mine', '--name', 'n']), {
    deleted: 'n',
  });

  const jobs = await json(['jobs', '--project', 'mine', '--limit', '2']);
  assert.equal(jobs.jobs.length, 2);
  const last = jobs.jobs.at(-1);
  const view = await json(['job', `mine#${last.number}`]);
  assert.deepEqual(Object.keys(view).sort(), ['job', 'tasks']);
  assert.equal(view.job.id, last.id);
  assert.deepEqual((await json(['artifacts', `mine#${last.number}`])).artifacts, []);
  assert.deepEqual((await json(['caches', '--project', 'mine'])).caches, []);
  assert.ok(Array.isArray((await json(['audit', '--project', 'two'])).events));
  const log = await json(['log', view.tasks[0].id]);
  assert.equal(log.task_id, view.tasks[0].id);
  assert.equal(typeof log.log, 'string');
  // The first job of the file failed: finished, so it may be rerun.
  const rerun = await json(['rerun', 'mine#1']);
  assert.equal(typeof rerun.number, 'number');
  assert.equal(typeof (await json(['cancel', rerun.job_id])), 'object');
  await writeFile(join(home, 'bad.yml'), 'version: 2\ntasks: {}\n');
  const invalid = await conductor(['validate', 'bad.yml', '--json']);
  assert.equal(invalid.code, 1);
  const problems = JSON.parse(invalid.out);
  assert.equal(problems.valid, false);
  assert.match(problems.issues[0].message, /must be 1/);
  await writeFile(join(home, 'p.yml'), 'version: 1\ntasks:\n  a:\n    script: [x]\n');
  const planned = await json(['validate', 'p.yml', '--ref', 'main']);
  assert.deepEqual([planned.valid, planned.tasks.map((t: Json) => t.name)], [true, ['a']]);
  assert.deepEqual(await json(['project', 'delete', 'two']), { deleted: 'two' });
});

test('errors say what to do: no server, a refused token, no token', async () => {
  const unreachable = await conductor(['projects'], {
    env: { CONDUCTOR_URL: 'http://127.0.0.1:9', CONDUCTOR_ADMIN_TOKEN: 'x' },
  });
  assert.equal(unreachable.code, 1);
  assert.equal(
    unreachable.out,
    'could not reach http://127.0.0.1:9: is `conductor server` or `npm start` running? `--url` or CONDUCTOR_URL',
  );
  const refused = await conductor(['projects', '--token', 'ca_wrong'], {
    env: { CONDUCTOR_URL: stack.url },
  });
  assert.equal(refused.code, 1);
  assert.equal(
    refused.out,
    'GET /v1/projects: the admin token was refused; the token `npm start` printed is in `.conductor/admin-token` (or give --token-file PATH, or set CONDUCTOR_ADMIN_TOKEN)',
  );
  // No token at all (none given, none kept here) is another message, before any request.
  const missing = await conductor(['projects'], { env: { CONDUCTOR_URL: 'http://127.0.0.1:9' } });
  assert.equal(missing.code, 2);
  assert.match(
    missing.out,
    /^no admin token: set CONDUCTOR_ADMIN_TOKEN, give --token-file PATH, or run this where/,
  );
  // The local stack's token file, where `npm start` keeps it, is read.
  await writeFile(join(home, 'kept-token'), stack.adminToken);
  const kept = await conductor(['projects', '--token-file', 'kept-token', '--json'], {
    env: { CONDUCTOR_URL: stack.url },
  });
  assert.equal(kept.code, 0, kept.out);
});
