// Runner pools with the `process` provider, through the local stack (the real
// functions behind the real HTTP server) and the reference runner as child
// processes: no runner is started by hand. The stack runs no sweep on its
// own; a test runs one where the reconcile is what it checks.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { runSweep } from '../../lib/app/sweep.ts';
import type { ProcessProvider } from '../../lib/fleet/process.ts';
import { testStack } from '../helpers/stack.ts';
import { startTcpProxy } from '../helpers/tcp-proxy.ts';
import { tempDir, waitFor } from '../runner/support.ts';
import { poolProject } from './support.ts';

// A short lease, so that a runner killed mid-task is taken over within the test.
const stack = await testStack(import.meta.filename, { CONDUCTOR_LEASE_S: '4' });
const admin = { token: stack.adminToken };
const provider = stack.context.fleet!.process as ProcessProvider;

/** Every pid the provider has running, sampled every 25 ms until `stop()`; answers the most at once. */
function watchRunners() {
  let most = 0;
  const seen = new Set<number>();
  let on = true;
  const done = (async () => {
    while (on) {
      const pids = provider.pids();
      for (const p of pids) seen.add(p);
      most = Math.max(most, pids.length);
      await sleep(25);
    }
  })();
  return {
    seen,
    async stop() {
      on = false;
      await done;
      return most;
    },
  };
}

/** A project on a git repository with `tasks` under `label`, and a process pool serving it. */
async function setup(
  label: string,
  tasks: string,
  pool: { max: number; idle?: number; url?: string },
) {
  return poolProject(stack, label, tasks, {
    trust: 'trusted',
    provider: 'process',
    max: pool.max,
    settings: {
      // The test's own user runs the scripts (as the runner tests' do): they write to its temp dirs.
      same_user: true,
      idle_limit_s: pool.idle ?? 5,
      workdir: await tempDir('conductor-pool-work-'),
      ...(pool.url ? { url: pool.url } : {}),
    },
  });
}

async function job(id: string) {
  const res = await stack.call('GET', `/v1/jobs/${id}`, admin);
  assert.equal(res.status, 200, res.text);
  return res.body as {
    job: { state: string };
    tasks: {
      id: string;
      name: string;
      state: string;
      attempt: number;
      queue_reason: string | null;
    }[];
  };
}

const finished = (id: string, timeoutMs = 60_000) =>
  waitFor(
    `job ${id} to finish`,
    async () => {
      const v = await job(id);
      return ['pending', 'running'].includes(v.job.state) ? undefined : v;
    },
    timeoutMs,
  );

/** The pool's workers (each launch's), as GET /v1/workers lists them. */
async function poolWorkers(pool: string) {
  const res = await stack.call('GET', '/v1/workers', admin);
  return (
    res.body.workers as { name: string; revoked: boolean; ephemeral: boolean; id: string }[]
  ).filter((w) => w.name === `pool ${pool}`);
}

async function poolView(name: string) {
  const res = await stack.call('GET', '/v1/pools', admin);
  assert.equal(res.status, 200, res.text);
  return (
    res.body.pools as { name: string; runners: { starting: number; running: number } }[]
  ).find((p) => p.name === name)!;
}

test("a push's task runs on a runner the pool launched; after it no runner is left and its worker is revoked", async () => {
  const { id, push } = await setup(
    'pool-push',
    '  build:\n    script: [echo built by a launched runner]\n',
    {
      max: 2,
    },
  );
  const watch = watchRunners();
  const jobId = await push();
  const view = await finished(jobId);
  assert.equal(view.job.state, 'success');
  const log = await stack.call('GET', `/v1/tasks/${view.tasks[0]!.id}/log`, admin);
  assert.match(log.text, /built by a launched runner/);
  await waitFor('the runner to exit', () => (provider.pids().length === 0 ? true : undefined));
  assert.equal(await watch.stop(), 1, 'one task, one runner');
  const workers = await waitFor('the launch to end', async () => {
    const w = await poolWorkers(id);
    return w.length > 0 && w.every((x) => x.revoked) ? w : undefined;
  });
  assert.equal(workers.length, 1);
  assert.ok(workers[0]!.ephemeral);
  assert.deepEqual((await poolView(id)).runners, { starting: 0, running: 0 });
});

test('three tasks at once with a maximum of two never have more than two runners, and all three run', async () => {
  const tasks = ['a', 'b', 'c'].map((n) => `  ${n}:\n    script: [sleep 1]\n`).join('');
  const { id, push } = await setup('pool-max', tasks, { max: 2 });
  const watch = watchRunners();
  const jobId = await push();
  // While two run, the third says why it waits.
  const waiting = await waitFor('a task waiting for the pool', async () => {
    const v = await job(jobId);
    const reason = v.tasks.find((t) => t.state === 'queued')?.queue_reason ?? '';
    return reason.includes('2 of 2') ? reason : undefined;
  });
  assert.equal(waiting, `waiting for a runner of pool ${id} (2 of 2 at work)`);
  const view = await finished(jobId);
  assert.deepEqual(
    view.tasks.map((t) => t.state),
    ['success', 'success', 'success'],
  );
  await waitFor('the runners to exit', () => (provider.pids().length === 0 ? true : undefined));
  const most = await watch.stop();
  assert.equal(most, 2, `at most two runners at once (saw ${most})`);
  assert.equal(watch.seen.size, 3, 'one runner per task');
  const workers = await waitFor('every launch to end', async () => {
    const w = await poolWorkers(id);
    return w.length === 3 && w.every((x) => x.revoked) ? w : undefined;
  });
  assert.equal(workers.length, 3);
});

test('a runner launched for a task another runner took exits within its idle limit, and its worker is revoked', async () => {
  const label = 'pool-idle';
  // The launched runner reaches the stack through a proxy held frozen until
  // the other worker has the task: it starts, and finds nothing.
  const proxy = await startTcpProxy(stack.url);
  after(() => proxy.close());
  const { id, push } = await setup(label, '  build:\n    script: [echo taken]\n', {
    max: 1,
    idle: 1,
    url: proxy.url(stack.url),
  });
  // A polling runner's worker, not yet seen: the pool launches as if none were there.
  const other = await stack.call('POST', '/v1/workers', {
    ...admin,
    body: { name: 'by hand', labels: [label], projects: [id] },
  });
  assert.equal(other.status, 201, other.text);
  proxy.freezeAll();
  const watch = watchRunners();
  try {
    const jobId = await push();
    // The launch is decided and its runner started (its calls held by the proxy).
    await waitFor('the launch', () => (watch.seen.size === 1 ? true : undefined));
    const claimed = await waitFor('the other worker to claim', async () => {
      const res = await stack.call('POST', '/v1/runner/claim', { token: other.body.token });
      return res.status === 200 ? res.body.task : undefined;
    });
    // Finish it by hand, as its runner would.
    const done = await stack.call('POST', `/v1/runner/tasks/${claimed.id}/complete`, {
      token: other.body.token,
      body: { lease_id: claimed.lease_id, outcome: 'success', exit_code: 0 },
    });
    assert.equal(done.status, 200, done.text);
    assert.equal((await finished(jobId)).job.state, 'success');
  } finally {
    proxy.thawAll();
  }
  // The launched runner found nothing and left by itself, well within a few seconds.
  await waitFor(
    'the launched runner to exit',
    () => (provider.pids().length === 0 ? true : undefined),
    15_000,
  );
  assert.equal(watch.seen.size, 1, 'the pool launched one runner');
  await watch.stop();
  const workers = await waitFor('its launch to end', async () => {
    const w = await poolWorkers(id);
    return w.length === 1 && w[0]!.revoked ? w : undefined;
  });
  assert.equal(workers.length, 1);
  // The sweep finds nothing left to do.
  const summary = await runSweep(stack.context);
  assert.equal(summary.launches_started, 0);
  assert.equal(summary.launches_ended, 0);
});

test('a launched runner killed mid-task is handled as any lost runner: the task is taken over by a new launch', async () => {
  const { id, push } = await setup('pool-kill', '  build:\n    script: [sleep 3]\n', { max: 1 });
  const jobId = await push();
  const first = await waitFor('the task to run', async () => {
    const v = await job(jobId);
    return v.tasks[0]!.state === 'running' && provider.pids().length === 1
      ? provider.pids()[0]
      : undefined;
  });
  process.kill(first!, 'SIGKILL');
  // Its launch ends with the process, and the task waits for its lease to run out.
  await waitFor('the launch to end', async () => {
    const w = await poolWorkers(id);
    return w.length === 1 && w[0]!.revoked ? true : undefined;
  });
  // Once the lease has run out, the sweep launches a runner that takes it over.
  const taken = await waitFor(
    'a second runner',
    async () => {
      await runSweep(stack.context);
      const pids = provider.pids();
      return pids.length === 1 && pids[0] !== first ? pids[0] : undefined;
    },
    20_000,
  );
  assert.ok(taken);
  const view = await finished(jobId);
  assert.equal(view.job.state, 'success');
  assert.equal(view.tasks[0]!.attempt, 2, 'the second attempt took it over');
  await waitFor('the runner to exit', () => (provider.pids().length === 0 ? true : undefined));
  const workers = await poolWorkers(id);
  assert.equal(workers.length, 2);
  await waitFor('both launches to end', async () => {
    const w = await poolWorkers(id);
    return w.every((x) => x.revoked) ? true : undefined;
  });
});

test('a task no pool and no runner serves says so as its waiting reason', async () => {
  const { push } = await setup(
    'pool-gpu',
    '  build:\n    labels: [gpu]\n    script: [echo never]\n',
    {
      max: 1,
    },
  );
  const jobId = await push();
  const reason = await waitFor(
    'the reason',
    async () => (await job(jobId)).tasks[0]?.queue_reason ?? undefined,
  );
  assert.match(
    reason,
    /^no runner or pool serves labels gpu for trusted tasks of project pool-gpu-/,
  );
  assert.equal(provider.pids().length, 0);
  const cancel = await stack.call('POST', `/v1/jobs/${jobId}/cancel`, admin);
  assert.equal(cancel.status, 200, cancel.text);
});

test("a pool's creation, change and deletion, and each launch and revocation, are in the installation audit", async () => {
  const { id, push } = await setup('pool-audit', '  build:\n    script: [echo audited]\n', {
    max: 1,
  });
  const jobId = await push();
  assert.equal((await finished(jobId)).job.state, 'success');
  const [worker] = await waitFor('the launch to end', async () => {
    const w = await poolWorkers(id);
    return w.length === 1 && w[0]!.revoked ? w : undefined;
  });
  const patched = await stack.call('PATCH', `/v1/pools/${id}`, { ...admin, body: { max: 3 } });
  assert.equal(patched.status, 200, patched.text);
  const deleted = await stack.call('DELETE', `/v1/pools/${id}`, admin);
  assert.equal(deleted.status, 204, deleted.text);

  const res = await stack.call('GET', '/v1/audit?limit=100', admin);
  assert.equal(res.status, 200, res.text);
  const mine = (
    res.body.events as { actor: string; action: string; subject: string; detail: string }[]
  )
    .filter((e) => e.action.startsWith('pool.') && (e.subject === id || e.subject === worker!.id))
    .reverse()
    .map((e) => [
      e.actor,
      e.action,
      e.subject,
      e.detail.replace(/runner pid:\d+ /, 'runner pid:N '),
    ]);
  const scope = `process, trusted; labels pool-audit; projects ${id}`;
  assert.deepEqual(mine, [
    ['admin token', 'pool.create', id, `${id}: ${scope}; max 1`],
    [
      'conductor',
      'pool.launch',
      worker!.id,
      `${id}: process runner pid:N for a task of project ${id}`,
    ],
    ['conductor', 'pool.revoke', worker!.id, `${id}: its runner finished`],
    ['admin token', 'pool.update', id, `${id}: ${scope}; max 3 (changed: max)`],
    ['admin token', 'pool.delete', id, `${id}: ${scope}; max 3`],
  ]);
});
