// A queued task starts at once (#52): idle runners hold a long poll that a
// commit making a task claimable wakes (LISTEN/NOTIFY on the local stack),
// and with the channel broken they still poll.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { PostgresPickup } from '../../lib/pickup/index.ts';
import { sendPush } from '../../local/push.ts';
import type { RunnerEvent } from '../../runner/index.ts';
import { testStack } from '../helpers/stack.ts';
import { Fixture, gitRepo, waitFor } from '../runner/support.ts';

const stack = await testStack(import.meta.filename);
const pickup = stack.context.pickup as PostgresPickup;

/** A project with a webhook secret, its worker, and a push of its commit. */
async function pushable(label: string) {
  const pipeline = `version: 1\ndefaults:\n  labels: [${label}]\ntasks:\n  quick:\n    script: ['true']\n`;
  const repo = await gitRepo({ '.conductor.yml': pipeline });
  const id = `${label}-${randomBytes(3).toString('hex')}`;
  const project = await stack.call('POST', '/v1/projects', {
    token: stack.adminToken,
    body: { id, name: id, forge: 'github', repo: `acme/${id}`, repo_url: repo.dir },
  });
  assert.equal(project.status, 201, project.text);
  const worker = await stack.call('POST', '/v1/workers', {
    token: stack.adminToken,
    body: { name: `${label}-worker`, labels: [label] },
  });
  assert.equal(worker.status, 201, worker.text);
  const fixture = new Fixture(stack, id, worker.body.token, repo);
  let sha = repo.sha;
  /** Pushes a new commit (`fresh`) or the first one. */
  const push = async (fresh = false) => {
    if (fresh) {
      const git = (...args: string[]) =>
        execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', ...args], {
          cwd: repo.dir,
        })
          .toString()
          .trim();
      git('commit', '-q', '--allow-empty', '-m', 'again');
      sha = git('rev-parse', 'HEAD');
    }
    const sent = await sendPush({
      url: stack.url,
      forge: 'github',
      repo: `acme/${id}`,
      repoUrl: repo.dir,
      sha,
      ref: 'refs/heads/main',
      secret: project.body.webhook_secret,
    });
    assert.ok(sent.status < 300, sent.text);
  };
  return { fixture, push };
}

/** A runner whose task starts are recorded with their time. */
async function watchedRunner(fixture: Fixture, over: Parameters<Fixture['runner']>[0]) {
  const started: number[] = [];
  const runner = await fixture.runner({
    ...over,
    onEvent: (e: RunnerEvent) => {
      if (e.type === 'task-started') started.push(Date.now());
    },
  });
  return { runner, started };
}

/** Claims that hold no pool connection: checked-out clients of the stack's pool. */
function poolInUse(): number {
  const pool = stack.context.pool;
  return pool.totalCount - pool.idleCount;
}

test('with the runner idle longer than its poll ceiling, a push runs its task within a second', async () => {
  const { fixture, push } = await pushable('lp-fast');
  // The default ceiling (10 s): a polling runner idle this long next looks 8 to 10 s away.
  const { started } = await watchedRunner(fixture, { pollMinMs: 500, pollMaxMs: 10_000 });
  // A first job warms the process (the compiler's first load takes seconds).
  await push();
  await waitFor('the first task to start', () => started[0], 20_000);
  await sleep(11_000);
  const pushed = Date.now();
  await push(true);
  await waitFor('the task to start', () => started[1], 10_000);
  // From the commit that queued it to the claim, on the database's clock:
  // the compile before it (seconds on a loaded machine) is not the wait.
  const { rows } = await stack.context.pool.query(
    `select extract(epoch from (t.started_at - t.queued_at)) * 1000 as waited_ms
       from tasks t join jobs j on j.id = t.job_id
      where j.project_id = $1 order by j.number desc limit 1`,
    [fixture.project],
  );
  const waited = Number(rows[0].waited_ms);
  assert.ok(
    waited < 1_000,
    `the task was claimed ${Math.round(waited)} ms after it was queued (${started[1]! - pushed} ms after the push)`,
  );
});

test('the listener connection killed: a waiting long poll answers at once, the runner polls, and the channel comes back', async () => {
  const { fixture, push } = await pushable('lp-killed');
  // A claim waiting 20 s on the channel...
  const asked = Date.now();
  const waiting = fetch(`${stack.url}/v1/runner/claim?wait=20`, {
    method: 'POST',
    headers: { authorization: `Bearer ${fixture.token}`, 'content-type': 'application/json' },
    body: '{}',
  });
  await waitFor('the long poll to wait', () => (poolInUse() === 0 ? true : undefined));
  await sleep(300);
  const pid = pickup.backendPid;
  assert.ok(pid, 'the channel listens');
  const killed = await stack.context.pool.query('select pg_terminate_backend($1) as ok', [pid]);
  assert.equal(killed.rows[0].ok, true);
  // ...is answered "nothing" at once: its runner polls while the channel is down.
  const answer = await waiting;
  assert.equal(answer.status, 204);
  assert.ok(Date.now() - asked < 5_000, `answered after ${Date.now() - asked} ms`);
  // A runner polling meanwhile still runs a push's task within its poll period.
  const { started } = await watchedRunner(fixture, { pollMinMs: 500, pollMaxMs: 2_000 });
  await push();
  await waitFor('the task to start with the channel down or back', () => started[0], 4_000);
  // The channel listens again on a new connection.
  const again = await waitFor('the channel to listen again', () => pickup.backendPid ?? undefined);
  assert.notEqual(again, pid);
});

test('a lost NOTIFY costs at most the long poll: the task still runs once the wait ends', async () => {
  const { fixture, push } = await pushable('lp-lost');
  const { started } = await watchedRunner(fixture, { claimWaitS: 3, pollMaxMs: 10_000 });
  await sleep(4_000);
  // Every wake-up from now on is lost (as a NOTIFY no listener heard).
  const announce = pickup.announce;
  pickup.announce = () => {};
  try {
    const pushed = Date.now();
    await push();
    await waitFor('the task to start after the wait', () => started[0], 6_000);
    const took = started[0]! - pushed;
    assert.ok(took < 4_500, `the task started ${took} ms after the push`);
  } finally {
    pickup.announce = announce;
  }
});

test('an empty long poll holds no pool connection while it waits, and a woken one claims', async () => {
  const { fixture, push } = await pushable('lp-pool');
  const claim = () =>
    fetch(`${stack.url}/v1/runner/claim?wait=10`, {
      method: 'POST',
      headers: { authorization: `Bearer ${fixture.token}`, 'content-type': 'application/json' },
      body: '{}',
    });
  const polls = [claim(), claim(), claim(), claim(), claim()];
  await sleep(1_000);
  assert.equal(poolInUse(), 0, 'five waiting long polls hold no connection');
  const busy = await stack.context.pool.query(
    `select count(*)::int as n from pg_stat_activity
      where datname = current_database() and application_name = 'conductor' and state <> 'idle'
        and pid <> pg_backend_pid()`,
  );
  assert.equal(busy.rows[0].n, 0, 'the database runs nothing for them');
  const pushed = Date.now();
  await push();
  const first = await Promise.race(polls.map((p, i) => p.then((r) => ({ r, i }))));
  assert.equal(first.r.status, 200);
  assert.ok(Date.now() - pushed < 5_000);
  // The others go on waiting (one task, one claim) and end empty.
  const rest = await Promise.all(polls.filter((_, i) => i !== first.i));
  assert.deepEqual(
    rest.map((r) => r.status),
    [204, 204, 204, 204],
  );
});

test('a wait above 25 s is refused naming wait', async () => {
  const { fixture } = await pushable('lp-bad');
  for (const wait of ['26', '-1', '1.5', 'soon']) {
    const res = await stack.call('POST', `/v1/runner/claim?wait=${wait}`, {
      token: fixture.token,
      body: {},
    });
    assert.equal(res.status, 400, `wait=${wait}: ${res.text}`);
    assert.equal(res.body.error.issues[0].path, 'wait');
  }
});

test('a runner stopped during its long poll is not handed the next task', async () => {
  const { fixture, push } = await pushable('lp-stop');
  const { runner } = await watchedRunner(fixture, {});
  await sleep(1_000);
  const stopping = Date.now();
  await runner.stop({ graceMs: 0 });
  assert.ok(Date.now() - stopping < 3_000, 'stop() does not wait out the long poll');
  await push();
  // The server's wait for the gone runner ended: nobody claims the task.
  await sleep(1_500);
  const jobs = await stack.call('GET', `/v1/projects/${fixture.project}/jobs`, {
    token: stack.adminToken,
  });
  const jobId = jobs.body.jobs[0].id as string;
  const view = await fixture.job(jobId);
  assert.equal(view.tasks[0]?.state, 'queued');
});
