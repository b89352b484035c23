// Stopping docker tasks on a real Docker engine (DOCKER_HOST; test/helpers/docker.ts):
// cancel, timeout with a script that ignores SIGTERM (and the sweep running
// meanwhile), a lease lost while the script is being stopped, a runner stopped
// gracefully and one SIGKILLed. After each, nothing of the task's is left in
// `docker ps -a` or `docker network ls`.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { runSweep } from '../../lib/app/sweep.ts';
import type { RunnerEvent } from '../../runner/index.ts';
import { BUSYBOX, labelled, nothingLeft, requireEngine, WEBSVC } from '../helpers/docker.ts';
import { testStack } from '../helpers/stack.ts';
import { childRunner, Fixture, tempDir, waitFor } from './support.ts';

// A short lease: heartbeats (and so cancels and lost leases) within a second.
const stack = await testStack(import.meta.filename, { CONDUCTOR_LEASE_S: '3' });
await requireEngine();

// A script that ignores SIGTERM, with a service: stopping it takes the kill grace.
const STUBBORN = `    image: ${BUSYBOX}
    services:
      web:
        image: ${WEBSVC}
        health: 'wget -q -O - http://localhost:8080/'
    script:
      - trap 'echo TERM ignored' TERM
      - echo running
      - while true; do sleep 1; done
`;

/** Waits until the task's script has printed `running`; answers the task's id. */
async function whenRunning(f: Fixture, jobId: string): Promise<string> {
  const task = await f.task(jobId, 'work');
  await waitFor(
    'the script to run',
    async () => ((await f.log(task.id)).includes('\nrunning\n') ? true : undefined),
    30_000,
  ).catch(async (err) => {
    throw new Error(
      `${err.message}: ${JSON.stringify(await f.job(jobId))}\n${await f.log(task.id)}`,
    );
  });
  return task.id;
}

test('cancelling a job stops its container and removes it, its service and its network', async () => {
  const f = await Fixture.create(stack, 'docker-cancel', `  work:\n${STUBBORN}`);
  await f.runner({ executor: 'docker' });
  const jobId = await f.trigger();
  const taskId = await whenRunning(f, jobId);
  const cancel = await stack.call('POST', `/v1/jobs/${jobId}/cancel`, { token: stack.adminToken });
  assert.equal(cancel.status, 200, cancel.text);
  const task = await waitFor('the task to be reported', async () => {
    const t = await f.task(jobId, 'work');
    return t.state === 'running' ? undefined : t;
  });
  assert.equal(task.state, 'cancelled');
  await nothingLeft(taskId);
});

test("a task past its timeout is stopped (its script ignoring SIGTERM) and reported by its runner, with its log's tail and its service's log, while the sweep runs", async () => {
  const f = await Fixture.create(stack, 'docker-timeout', `  work:\n    timeout: 10s\n${STUBBORN}`);
  const runner = await f.runner({ executor: 'docker', killGraceMs: 3_000 });
  const jobId = await f.trigger();
  const taskId = await whenRunning(f, jobId);
  // The control plane's sweep, every half second, as the task times out and is stopped.
  const view = await waitFor(
    'the task to end',
    async () => {
      await runSweep(stack.context);
      const v = await f.job(jobId);
      if (v.job.state === 'running') {
        await sleep(500);
        return undefined;
      }
      return v;
    },
    60_000,
  );
  const task = view.tasks[0]!;
  assert.equal(task.state, 'failed');
  assert.equal(task.error, 'timed out after 10s');
  const attempts = await stack.context.pool.query(
    'select outcome from task_attempts where task_id = $1',
    [taskId],
  );
  // The runner's report, not the sweep's `timed_out`.
  assert.deepEqual(attempts.rows, [{ outcome: 'failed' }]);
  const log = await f.log(taskId);
  assert.match(log, /^\[conductor\] timed out after 10s: stopping the script$/m);
  assert.match(log, /\n--- service web \(conductor-test\/websvc:1\) ---\n(.*\n)*$/);
  await waitFor('the runner to free its slot', () => (runner.running() === 0 ? true : undefined));
  await nothingLeft(taskId);
});

test('a runner whose lease is gone while it stops a timed-out script stops uploading at once, frees its slot and removes everything', async () => {
  const f = await Fixture.create(stack, 'docker-lease', `  work:\n    timeout: 15s\n${STUBBORN}`);
  const events: RunnerEvent[] = [];
  const runner = await f.runner({
    executor: 'docker',
    killGraceMs: 2_000,
    onEvent: (e) => events.push(e),
  });
  const jobId = await f.trigger();
  const taskId = await whenRunning(f, jobId);
  await waitFor('the timeout', async () =>
    (await f.log(taskId)).includes('[conductor] timed out after 15s') ? true : undefined,
  );
  // The sweep fails the task now (as if its grace had passed): the lease is gone.
  await stack.context.pool.query(
    `update task_attempts set started_at = now() - interval '1 hour' where task_id = $1`,
    [taskId],
  );
  assert.equal((await runSweep(stack.context)).tasks_timed_out, 1);
  const swept = Date.now();
  await waitFor('the runner to free its slot', () => (runner.running() === 0 ? true : undefined));
  // Well short of the 30 s the final upload would otherwise be retried for.
  const took = Date.now() - swept;
  assert.ok(took < 20_000, `the slot was freed ${took} ms after the sweep`);
  const finished = events.find((e) => e.type === 'task-finished');
  assert.equal(finished?.type === 'task-finished' && finished.outcome, 'lost');
  assert.equal((await f.task(jobId, 'work')).state, 'failed');
  await nothingLeft(taskId);
});

test('a runner stopped gracefully gives its task back and removes its containers and network', async () => {
  const f = await Fixture.create(stack, 'docker-stop', `  work:\n${STUBBORN}`);
  const runner = await f.runner({ executor: 'docker', killGraceMs: 1_000 });
  const jobId = await f.trigger();
  const taskId = await whenRunning(f, jobId);
  await runner.stop({ graceMs: 0 });
  const task = await f.task(jobId, 'work');
  assert.equal(task.state, 'queued');
  await nothingLeft(taskId);
});

test("a runner SIGKILLed leaves its task's containers labelled, and the next runner on its work directory removes them and says so", async () => {
  const f = await Fixture.create(stack, 'docker-killed', `  work:\n${STUBBORN}`);
  const workdir = await tempDir('conductor-docker-killed-');
  const first = childRunner([
    '--url',
    stack.url,
    '--token-file',
    await f.tokenFile(),
    '--poll-max-s',
    '0.3',
    '--executor',
    'docker',
    '--workdir',
    workdir,
  ]);
  const jobId = await f.trigger();
  const taskId = await whenRunning(f, jobId);
  first.child.kill('SIGKILL');
  await first.exited;
  // The documented clean-up finds all of it by its label: the script's container too.
  const left = await labelled(taskId);
  assert.equal(left.length, 2, JSON.stringify(left));
  assert.ok(
    left.some((name) => name.startsWith(`conductor-${taskId}-`)),
    `the script's container: ${left}`,
  );

  // Runners of a worker that claims none of this project's tasks.
  const worker = await stack.call('POST', '/v1/workers', {
    token: stack.adminToken,
    body: { name: 'docker-killed-other', labels: ['docker-killed-other'] },
  });
  assert.equal(worker.status, 201, worker.text);
  const other = new Fixture(stack, f.project, worker.body.token, f.repo);
  // One on another work directory leaves them alone.
  await other.runner({ executor: 'docker' });
  assert.equal((await labelled(taskId)).length, 2);

  const lines: Array<{ message: string; fields: Record<string, unknown> }> = [];
  await other.runner({
    executor: 'docker',
    workdir,
    log: (_level, message, fields = {}) => lines.push({ message, fields }),
  });
  await nothingLeft(taskId);
  const said = lines.find((l) => l.message.startsWith('removed the containers and networks'));
  assert.ok(said, JSON.stringify(lines));
  assert.equal((said.fields.containers as string[]).length, 2);
  assert.equal((said.fields.networks as string[]).length, 1);
});
