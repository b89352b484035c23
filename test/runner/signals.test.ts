// The runner as a process (`npm run runner`): killed outright, stopped with
// SIGTERM, and refusing to start without a Docker engine.
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { runSweep } from '../../lib/app/sweep.ts';
import { testStack } from '../helpers/stack.ts';
import { childRunner, Fixture, groupAlive, killGroup, tempDir, waitFor } from './support.ts';

// A short lease, so a runner that vanished is noticed within seconds.
const stack = await testStack(import.meta.filename, { CONDUCTOR_LEASE_S: '2' });

async function runnerArgs(f: Fixture, ...more: string[]): Promise<string[]> {
  return [
    '--url',
    stack.url,
    '--token-file',
    await f.tokenFile(),
    '--poll-max-s',
    '0.3',
    '--kill-grace-s',
    '2',
    // The scripts write to the test's temp dirs (0700, root's when the test is).
    '--same-user',
    ...more,
  ];
}

/** The process group id a script wrote to `file` (its $$), once it is there. */
function pidIn(file: string): Promise<number> {
  return waitFor(`${file} to be written`, () => {
    const text = existsSync(file) ? readFileSync(file, 'utf8') : '';
    return text.endsWith('\n') ? Number(text) : undefined;
  });
}

const SECOND_ATTEMPT_ONLY = (dir: string, words: string) => `
    script:
      - echo $$ > "${dir}/pid-$CONDUCTOR_ATTEMPT"
      - if [ "$CONDUCTOR_ATTEMPT" = 1 ]; then sleep 30; fi
      - echo "${words} on attempt $CONDUCTOR_ATTEMPT"
`;

test('a task whose runner was SIGKILLed is requeued by the sweep after its lease and finished by another runner', async () => {
  const dir = await tempDir('conductor-runner-kill-');
  const f = await Fixture.create(stack, 'killed', `  work:${SECOND_ATTEMPT_ONLY(dir, 'done')}`);
  const first = childRunner(
    await runnerArgs(f, '--workdir', await tempDir('conductor-runner-w1-')),
  );
  const jobId = await f.trigger();
  const orphan = await pidIn(join(dir, 'pid-1'));
  first.child.kill('SIGKILL');
  await first.exited;
  // A runner killed outright leaves its script running; this one would only
  // sleep, but the test does not leave it behind.
  killGroup(orphan);

  const second = await f.runner();
  const view = await waitFor(
    'the sweep to requeue the task and the second runner to finish it',
    async () => {
      await runSweep(stack.context);
      const v = await f.job(jobId);
      return v.job.state === 'running' ? undefined : v;
    },
    20_000,
  );
  assert.equal(view.job.state, 'success');
  const task = view.tasks[0]!;
  assert.equal(task.attempt, 2);
  assert.match(await f.log(task.id), /^done on attempt 2$/m);
  const attempts = await stack.context.pool.query(
    'select attempt, outcome, transient from task_attempts where task_id = $1 order by attempt',
    [task.id],
  );
  assert.deepEqual(attempts.rows, [
    { attempt: 1, outcome: 'lost', transient: true },
    { attempt: 2, outcome: 'success', transient: false },
  ]);
  await second.stop();
});

test('on SIGTERM the runner lets a short task finish within the grace period, then exits 0', async () => {
  const dir = await tempDir('conductor-runner-term-');
  const f = await Fixture.create(
    stack,
    'term-short',
    `  short:
    script:
      - echo $$ > "${dir}/pid"
      - sleep 1
      - echo finished
`,
  );
  const runner = childRunner(await runnerArgs(f, '--grace-s', '20'));
  const jobId = await f.trigger();
  await pidIn(join(dir, 'pid'));
  runner.child.kill('SIGTERM');
  const exit = await runner.exited;
  assert.deepEqual(exit, { code: 0, signal: null }, runner.stderr());
  const view = await f.job(jobId);
  assert.equal(view.job.state, 'success');
  assert.equal(view.tasks[0]!.attempt, 1);
  assert.match(await f.log(view.tasks[0]!.id), /^finished$/m);
  assert.match(runner.stderr(), /"message":"task finished"/);
});

test('on SIGTERM a task that outlasts the grace period is stopped and given back, and another runner completes it', async () => {
  const dir = await tempDir('conductor-runner-giveback-');
  const f = await Fixture.create(
    stack,
    'term-long',
    `  long:${SECOND_ATTEMPT_ONLY(dir, 'completed')}`,
  );
  const runner = childRunner(await runnerArgs(f, '--grace-s', '1'));
  const jobId = await f.trigger();
  const pid = await pidIn(join(dir, 'pid-1'));
  runner.child.kill('SIGTERM');
  const exit = await runner.exited;
  assert.deepEqual(exit, { code: 0, signal: null }, runner.stderr());
  // The script was stopped (its processes may linger a moment as zombies until reaped).
  await waitFor('the script to be gone', () => (groupAlive(pid) ? undefined : true), 10_000);

  const given = await f.task(jobId, 'long');
  assert.equal(given.state, 'queued');
  const first = await stack.context.pool.query(
    'select outcome, transient, error from task_attempts where task_id = $1 and attempt = 1',
    [given.id],
  );
  assert.deepEqual(first.rows, [
    {
      outcome: 'failed',
      transient: true,
      error: 'the runner shut down before the task finished; given back',
    },
  ]);
  assert.match(
    await f.log(given.id, 1),
    /\[conductor\] the runner is shutting down: stopping the script and giving the task back\n$/,
  );

  const second = await f.runner();
  const view = await f.finished(jobId);
  assert.equal(view.job.state, 'success');
  assert.equal(view.tasks[0]!.attempt, 2);
  assert.match(await f.log(view.tasks[0]!.id), /^completed on attempt 2$/m);
  await second.stop();
});

test('--executor docker without a Docker engine fails at start-up with a clear error', async () => {
  const runner = childRunner(
    ['--url', stack.url, '--executor', 'docker'],
    // Points the docker CLI at an engine that cannot answer, whatever this machine has.
    {
      ...process.env,
      CONDUCTOR_RUNNER_TOKEN: 'cw_unused',
      DOCKER_HOST: 'unix:///nonexistent/docker.sock',
    },
  );
  const exit = await runner.exited;
  assert.equal(exit.code, 1, runner.stderr());
  assert.match(
    runner.stderr(),
    /^conductor-runner: --executor docker needs a Docker engine, but `docker info` failed: /m,
  );
});
