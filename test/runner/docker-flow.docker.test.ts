// The docker executor on a real Docker engine (DOCKER_HOST; test/helpers/docker.ts),
// through the reference runner and the local stack: a task in its image with
// the checkout, live logs and outputs; services reached by name, health-waited,
// failing, exiting at once; a script's own 125; an image that does not run as
// root. After each task, nothing of it is left in `docker ps -a` or
// `docker network ls`.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { before, test } from 'node:test';
import { BUSYBOX, nothingLeft, requireEngine, userImage, WEBSVC } from '../helpers/docker.ts';
import { testStack } from '../helpers/stack.ts';
import { Fixture, waitFor } from './support.ts';

const stack = await testStack(import.meta.filename, { CONDUCTOR_LEASE_S: '5' });
before(requireEngine);

test('a task runs in its image on the checkout at /workspace, its log arrives while it runs, its outputs reach a dependent, and nothing of it is left', async () => {
  const f = await Fixture.create(
    stack,
    'docker-flow',
    `  build:
    image: ${BUSYBOX}
    outputs: [greeting]
    script:
      - cat hello.txt
      - pwd
      - if command -v bash || command -v git; then exit 9; fi
      - echo half-way
      - sleep 4
      - echo "greeting=$(cat hello.txt) from $CONDUCTOR_TASK_NAME" >> "$CONDUCTOR_OUTPUT"
  use:
    image: ${BUSYBOX}
    needs: [build]
    script:
      - echo "got [$CONDUCTOR_NEEDS_BUILD_GREETING]"
`,
    { 'hello.txt': 'hello from the repository\n' },
  );
  await f.runner({ executor: 'docker', defaultImage: BUSYBOX });
  const jobId = await f.trigger();
  const build = await f.task(jobId, 'build');
  // Live: the line is in the stored log while the script still sleeps.
  await waitFor('half-way in the log of the running task', async () => {
    const [task, log] = await Promise.all([f.task(jobId, 'build'), f.log(build.id)]);
    if (task.state !== 'running') throw new Error(`the task is ${task.state} already`);
    return log.includes('\nhalf-way\n') ? true : undefined;
  });
  const view = await f.finished(jobId, 60_000);
  const byName = Object.fromEntries(view.tasks.map((t) => [t.name, t]));
  assert.equal(byName.build!.state, 'success', byName.build!.error ?? '');
  assert.deepEqual(byName.build!.outputs, {
    greeting: 'hello from the repository from build',
  });
  assert.equal(byName.use!.state, 'success', byName.use!.error ?? '');
  const log = await f.log(build.id);
  assert.match(log, /^\+ cat hello.txt\nhello from the repository\n\+ pwd\n\/workspace\n/m);
  assert.match(await f.log(byName.use!.id), /^got \[hello from the repository from build\]$/m);
  await nothingLeft(byName.build!.id, byName.use!.id);
});

test("a script that exits 125 is the script's failure, reported once with its line, not Docker's", async () => {
  const f = await Fixture.create(
    stack,
    'docker-125',
    `  fails:
    image: ${BUSYBOX}
    script:
      - echo about to exit
      - exit 125
`,
  );
  await f.runner({ executor: 'docker' });
  const jobId = await f.trigger();
  const task = (await f.finished(jobId, 60_000)).tasks[0]!;
  assert.deepEqual(
    { state: task.state, attempt: task.attempt, exit_code: task.exit_code, error: task.error },
    {
      state: 'failed',
      attempt: 1,
      exit_code: 125,
      error: 'line 2 of the script exited with 125: exit 125',
    },
  );
  assert.doesNotMatch(await f.log(task.id), /executor failed/);
  await nothingLeft(task.id);
});

test("an image whose USER is not root gets the task's environment and secrets, and may write the workspace and its outputs", async () => {
  const image = await userImage();
  const secret = `user-secret-${randomBytes(6).toString('hex')}`;
  const f = await Fixture.create(
    stack,
    'docker-user',
    `  build:
    image: ${image}
    secrets: [API_KEY]
    env: {GREETING: hi}
    outputs: [owner]
    script:
      - echo "uid $(id -u), CI=$CI, $GREETING, task $CONDUCTOR_TASK_NAME"
      - test -n "$API_KEY" && echo "the key is $API_KEY"
      - echo built > made-here.txt && cat made-here.txt
      - echo "owner=$(stat -c %u made-here.txt)" >> "$CONDUCTOR_OUTPUT"
`,
    {},
    { API_KEY: secret },
  );
  await f.runner({ executor: 'docker' });
  const jobId = await f.trigger();
  const task = (await f.finished(jobId, 60_000)).tasks[0]!;
  assert.equal(task.state, 'success', `${task.error}\n${await f.log(task.id)}`);
  assert.deepEqual(task.outputs, { owner: '1000' });
  const log = await f.log(task.id);
  assert.match(log, /^uid 1000, CI=true, hi, task build$/m);
  assert.match(log, /^the key is \*\*\*$/m);
  assert.match(log, /^built$/m);
  await nothingLeft(task.id);
});

test('services are reached by name once healthy, with their own command and entrypoint, and their logs close the task log', async () => {
  const f = await Fixture.create(
    stack,
    'docker-services',
    `  test:
    image: ${BUSYBOX}
    services:
      web:
        image: ${WEBSVC}
        health: 'wget -q -O - http://localhost:8080/'
      alt:
        image: ${WEBSVC}
        entrypoint: [httpd, -f]
        command: [-vv, -p, '9090', -h, /www]
        health: 'wget -q -O - http://localhost:9090/'
    script:
      - wget -q -O - http://web:8080/
      - wget -q -O - http://alt:9090/
      - if wget -q -T 2 -O - http://alt:8080/; then exit 7; fi
`,
  );
  await f.runner({ executor: 'docker' });
  const jobId = await f.trigger();
  const task = (await f.finished(jobId, 60_000)).tasks[0]!;
  const log = await f.log(task.id);
  assert.equal(task.state, 'success', `${task.error}\n${log}`);
  assert.match(log, /^\[conductor\] the service web is healthy$/m);
  assert.match(log, /^\[conductor\] the service alt is healthy$/m);
  assert.match(
    log,
    /^\+ wget -q -O - http:\/\/web:8080\/\nhello from websvc\n\+ wget -q -O - http:\/\/alt:9090\/\nhello from websvc\n/m,
  );
  // busybox httpd -vv logs each request: the script's, from another address than the health checks'.
  const web = log.slice(log.indexOf(`--- service web (${WEBSVC}) ---\n`));
  assert.ok(web.length < log.length, log);
  assert.match(web, /^\[::ffff:(?!127\.)[0-9.]+\]:\d+: url:\/$/m);
  assert.ok(log.includes(`--- service alt (${WEBSVC}) ---\n`), log);
  await nothingLeft(task.id);
});

test('a service whose health command keeps failing fails its task, and one that exits at once fails it at once with what it printed', async () => {
  const f = await Fixture.create(
    stack,
    'docker-unhealthy',
    `  unhealthy:
    image: ${BUSYBOX}
    allow_failure: true
    services:
      web:
        image: ${WEBSVC}
        health: 'echo nobody on port 1; wget -q -O - http://localhost:1/'
        health_timeout: 2s
    script: ['echo the script ran']
  exits:
    image: ${BUSYBOX}
    allow_failure: true
    services:
      once:
        image: ${BUSYBOX}
        command: [sh, -c, 'echo bye from the service; exit 3']
        health: 'wget -q -O - http://localhost:1/'
        health_timeout: 1h
    script: ['echo the script ran']
`,
  );
  await f.runner({ executor: 'docker', concurrency: 2 });
  const jobId = await f.trigger();
  // Well within the 1h health timeout.
  const view = await f.finished(jobId, 60_000);
  const byName = Object.fromEntries(view.tasks.map((t) => [t.name, t]));
  const unhealthy = byName.unhealthy!;
  assert.deepEqual(
    { state: unhealthy.state, attempt: unhealthy.attempt },
    { state: 'failed', attempt: 1 },
  );
  assert.match(
    unhealthy.error ?? '',
    new RegExp(
      `^the service web \\(${WEBSVC.replace(/[/.]/g, '\\$&')}\\) was not healthy after 2s: its health command \`echo nobody on port 1; wget -q -O - http://localhost:1/\` last exited with 1: `,
    ),
  );
  assert.match(unhealthy.error ?? '', /nobody on port 1/);
  const exits = byName.exits!;
  assert.deepEqual({ state: exits.state, attempt: exits.attempt }, { state: 'failed', attempt: 1 });
  assert.equal(
    exits.error,
    `the service once (${BUSYBOX}) exited with 3 before it was healthy: bye from the service`,
  );
  for (const task of [unhealthy, exits]) {
    const log = await f.log(task.id);
    assert.doesNotMatch(log, /the script ran/);
    assert.ok(log.includes(`[conductor] ${task.error}\n`), log);
  }
  assert.match(await f.log(exits.id), /^--- service once .*---\nbye from the service$/m);
  await nothingLeft(unhealthy.id, exits.id);
});
