// Service containers (issue #34) through the real runner and control plane.
// There is no Docker engine here: a fake `docker` records every command it is
// given and acts enough like Docker (support.ts), so the tests read what the
// runner asked of Docker, in order.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { access, readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import type { Task } from '../../runner/protocol.ts';
import { SERVICE_LOG_BYTES, TaskServices } from '../../runner/services.ts';
import { sendWebhook } from '../e2e/calls.ts';
import { githubPullRequest } from '../forge/fixtures/github.ts';
import { testStack } from '../helpers/stack.ts';
import { Fixture, fakeDockerDir, recordingDocker, tempDir, waitFor } from './support.ts';

// A short lease: heartbeats, and so cancels, arrive within a second.
const stack = await testStack(import.meta.filename, { CONDUCTOR_LEASE_S: '3' });

/** The commands about one task: its network and containers are named after its id. */
function about(commands: string[], taskId: string): string[] {
  const prefix = `conductor-${taskId.replace(/[^a-zA-Z0-9]/g, '').slice(0, 12)}-`;
  return commands.filter((c) => c.includes(prefix) || c.includes(`conductor-${taskId}-`));
}

/** The index of the only command matching `re`, failing when there is not exactly one. */
function only(commands: string[], re: RegExp): number {
  const at = commands.flatMap((c, i) => (re.test(c) ? [i] : []));
  assert.equal(at.length, 1, `one command matching ${re} in:\n${commands.join('\n')}`);
  return at[0]!;
}

test('a service is started on the task network with its alias and env (no secret), its health command is run until it succeeds, the script joins the network, and after a failing script the container and the network are removed; its log, masked, follows the script', async () => {
  const dir = await tempDir('conductor-services-');
  const secret = `svc-secret-${randomBytes(6).toString('hex')}`;
  const ticks = join(dir, 'ticks');
  const health = `echo tick >> ${ticks}; [ $(wc -l < ${ticks}) -ge 3 ] || { echo not accepting connections; exit 1; }`;
  const f = await Fixture.create(
    stack,
    'services-flow',
    `  test:
    image: node:22
    secrets: [API_KEY]
    services:
      db:
        image: postgres:16
        env: {POSTGRES_PASSWORD: test, ECHOED: ${secret}}
        ports: [5432]
        health: '${health}'
        health_timeout: 30s
    script:
      - echo the script ran with "$API_KEY"
      - exit 3
`,
    {},
    { API_KEY: secret },
  );
  const docker = await recordingDocker();
  await f.runner(docker.options);
  const jobId = await f.trigger();
  const task = (await f.finished(jobId)).tasks[0]!;
  assert.deepEqual(
    { state: task.state, exit_code: task.exit_code, error: task.error },
    { state: 'failed', exit_code: 3, error: 'line 2 of the script exited with 3: exit 3' },
  );
  // The fake's health command leaves its count on the host.
  assert.equal((await readFile(ticks, 'utf8')).split('\n').filter(Boolean).length, 3);

  // Removal comes after the report: wait for the network's.
  const commands = await waitFor('the network to be removed', async () => {
    const all = about(await docker.commands(), task.id);
    return all.some((c) => c.startsWith('network rm ')) ? all : undefined;
  });
  const create = only(commands, /^network create /);
  const network = commands[create]!.split(' ').at(-1)!;
  assert.match(network, /^conductor-[a-z0-9]{12}-[0-9a-f]{6}$/);

  const start = only(commands, /^run --detach /);
  const args = commands[start]!.split(' ');
  const container = args[args.indexOf('--name') + 1]!;
  assert.equal(container, `${network}-db`);
  assert.equal(args[args.indexOf('--network') + 1], network);
  assert.equal(args[args.indexOf('--network-alias') + 1], 'db');
  assert.equal(args.at(-1), 'postgres:16');
  const env = args.flatMap((a, i) => (args[i - 1] === '--env' ? [a] : []));
  // In no particular order: the control plane keeps env as jsonb.
  assert.deepEqual(
    env.sort(),
    [`ECHOED=${secret}`, 'POSTGRES_PASSWORD=test'],
    'its own env, no secret',
  );
  assert.ok(!commands[start]!.includes('API_KEY'), commands[start]);

  const checks = commands.flatMap((c, i) => (c === `exec ${container} sh -c ${health}` ? [i] : []));
  assert.equal(checks.length, 3, 'run until it succeeded, the third time');

  const script = only(commands, /^run --rm --init /);
  assert.ok(commands[script]!.includes(` --network ${network} `), commands[script]);
  const rm = only(commands, /^rm -f /);
  assert.ok(commands[rm]!.split(' ').includes(container), commands[rm]);
  const netRm = only(commands, /^network rm /);
  assert.equal(commands[netRm], `network rm ${network}`);
  assert.ok(
    create < start && start < checks[0]! && checks[2]! < script && script < rm && rm < netRm,
    commands.join('\n'),
  );

  const log = await f.log(task.id);
  assert.ok(!log.includes(secret), log);
  const section = log.indexOf('--- service db (postgres:16) ---\n');
  assert.ok(section > log.indexOf('the script ran with ***'), log);
  // The env lines in jsonb's key order (shorter keys first), as the service got them.
  assert.match(
    log.slice(section),
    /^--- service db \(postgres:16\) ---\npostgres:16 starting\nenv ECHOED=\*\*\*\nenv POSTGRES_PASSWORD=test\npostgres:16 ready\n/,
  );
  assert.match(log, /^\[conductor\] the service db is healthy$/m);
});

test('an unhealthy service fails the task naming the service and its last health output (masked), a service that cannot start fails it too, and both remove everything without running the script', async () => {
  const dir = await tempDir('conductor-services-bad-');
  const marker = join(dir, 'ran');
  const secret = `svc-secret-${randomBytes(6).toString('hex')}`;
  const f = await Fixture.create(
    stack,
    'services-bad',
    `  unhealthy:
    allow_failure: true
    secrets: [API_KEY]
    services:
      cache:
        image: redis:7
        health: 'echo connection refused by ${secret}; exit 2'
        health_timeout: 2s
    script: ['touch ${marker}']
  later:
    allow_failure: true
    retries: 0
    services:
      db:
        image: postgres:16
      cache:
        image: fake/missing:1
    script: ['touch ${marker}']
`,
    {},
    { API_KEY: secret },
  );
  const docker = await recordingDocker();
  await f.runner(docker.options);
  const jobId = await f.trigger();
  const view = await f.finished(jobId);
  const byName = Object.fromEntries(view.tasks.map((t) => [t.name, t]));

  const unhealthy = byName.unhealthy!;
  assert.deepEqual(
    { state: unhealthy.state, attempt: unhealthy.attempt, exit_code: unhealthy.exit_code },
    { state: 'failed', attempt: 1, exit_code: null },
    'not transient: not retried',
  );
  assert.equal(
    unhealthy.error,
    'the service cache (redis:7) was not healthy after 2s: its health command `echo connection refused by ***; exit 2` last exited with 2: connection refused by ***',
  );
  const later = byName.later!;
  assert.equal(later.state, 'failed');
  assert.match(
    later.error ?? '',
    /^the service cache \(fake\/missing:1\) could not be started: .*pull access denied for fake\/missing:1/s,
  );
  await assert.rejects(access(marker), { code: 'ENOENT' }, 'no script ran');

  for (const [task, services] of [
    [unhealthy, ['cache']],
    [later, ['db', 'cache']],
  ] as const) {
    const commands = await waitFor(`${task.name}'s network to be removed`, async () => {
      const all = about(await docker.commands(), task.id);
      return all.some((c) => c.startsWith('network rm ')) ? all : undefined;
    });
    const network = commands[only(commands, /^network create /)]!.split(' ').at(-1)!;
    assert.ok(!commands.some((c) => c.startsWith('run --rm')), 'the script was never started');
    const removed = commands[only(commands, /^rm -f /)]!.split(' ');
    for (const name of services) assert.ok(removed.includes(`${network}-${name}`), name);
    only(commands, new RegExp(`^network rm ${network}$`));
    const log = await f.log(task.id);
    assert.ok(!log.includes(secret), log);
    assert.ok(log.includes(`[conductor] ${task.error}\n`), log);
  }
  const health = about(await docker.commands(), unhealthy.id).filter((c) => c.startsWith('exec '));
  assert.ok(health.length >= 2, `polled until the timeout: ${health.join('\n')}`);
});

test('cancelling a job while a service is being waited for stops the wait and removes the service and the network', async () => {
  const f = await Fixture.create(
    stack,
    'services-cancel',
    `  test:
    services:
      db:
        image: postgres:16
        health: 'exit 1'
        health_timeout: 1h
    script: ['true']
`,
  );
  const docker = await recordingDocker();
  await f.runner(docker.options);
  const jobId = await f.trigger();
  await waitFor('the health command to run', async () =>
    (await docker.commands()).some((c) => c.startsWith('exec ')) ? true : undefined,
  );
  const cancel = await stack.call('POST', `/v1/jobs/${jobId}/cancel`, { token: stack.adminToken });
  assert.equal(cancel.status, 200, cancel.text);
  // The job ends at once; its running task when the runner reports it.
  const task = await waitFor('the task to be reported', async () => {
    const t = await f.task(jobId, 'test');
    return t.state === 'running' ? undefined : t;
  });
  assert.equal(task.state, 'cancelled');
  assert.match(await f.log(task.id), /^\[conductor\] the job was cancelled: stopping the script$/m);
  const commands = await waitFor('the network to be removed', async () => {
    const all = about(await docker.commands(), task.id);
    return all.some((c) => c.startsWith('network rm ')) ? all : undefined;
  });
  const network = commands[only(commands, /^network create /)]!.split(' ').at(-1)!;
  assert.ok(commands[only(commands, /^rm -f /)]!.split(' ').includes(`${network}-db`));
  assert.ok(!commands.some((c) => c.startsWith('run --rm')), 'the script was never started');
});

test("a fork's pull request (untrusted, on an untrusted runner) gets its services too, each with its own env and never a secret", async () => {
  const secret = `svc-secret-${randomBytes(6).toString('hex')}`;
  const f = await Fixture.create(
    stack,
    'services-fork',
    `  test:
    secrets: [API_KEY]
    services:
      db:
        image: postgres:16
        env: {POSTGRES_PASSWORD: test}
        health: 'true'
    script:
      - echo "the key is [$API_KEY]"
`,
    {},
    { API_KEY: secret },
  );
  const admin = { token: stack.adminToken };
  const patched = await stack.call('PATCH', `/v1/projects/${f.project}`, {
    ...admin,
    body: { fork_pull_requests: 'run' },
  });
  assert.equal(patched.status, 200, patched.text);
  const rotated = await stack.call('POST', `/v1/projects/${f.project}/webhook-secret`, admin);
  const worker = await stack.call('POST', '/v1/workers', {
    ...admin,
    body: { name: 'services-fork-untrusted', labels: ['services-fork'], untrusted: true },
  });
  assert.equal(worker.status, 201, worker.text);
  const docker = await recordingDocker();
  await new Fixture(stack, f.project, worker.body.token, f.repo).runner({
    ...docker.options,
    untrusted: true,
  });
  const sent = await sendWebhook(
    stack,
    'github',
    'pull_request',
    githubPullRequest('opened', {
      repo: `acme/${f.project}`,
      number: 7,
      headSha: f.repo.sha,
      fromFork: true,
    }),
    { secret: rotated.body.webhook_secret },
  );
  assert.equal(sent.status, 202, sent.text);
  const jobId = sent.body.job_id as string;
  const view = await f.finished(jobId);
  assert.equal((await stack.call('GET', `/v1/jobs/${jobId}`, admin)).body.job.trusted, false);
  const task = view.tasks[0]!;
  assert.equal(task.state, 'success', JSON.stringify(task));

  const commands = await waitFor('the network to be removed', async () => {
    const all = about(await docker.commands(), task.id);
    return all.some((c) => c.startsWith('network rm ')) ? all : undefined;
  });
  const network = commands[only(commands, /^network create /)]!.split(' ').at(-1)!;
  const start = only(commands, /^run --detach /);
  const args = commands[start]!.split(' ');
  assert.equal(args[args.indexOf('--network-alias') + 1], 'db');
  assert.deepEqual(
    args.flatMap((a, i) => (args[i - 1] === '--env' ? [a] : [])),
    ['POSTGRES_PASSWORD=test'],
  );
  const script = only(commands, /^run --rm --init /);
  assert.ok(commands[script]!.includes(` --network ${network} `), commands[script]);
  assert.ok(start < script, commands.join('\n'));
  assert.ok(
    !commands.some((c) => c.includes(secret) || c.includes('API_KEY=')),
    commands.join('\n'),
  );
  const log = await f.log(task.id);
  assert.match(log, /^the key is \[\]$/m, 'an untrusted task gets no secret');
  assert.match(log, /^--- service db \(postgres:16\) ---$/m);
});

test('a shell-executor runner fails a task with services at once, naming the executor, and runs nothing', async () => {
  const dir = await tempDir('conductor-services-shell-');
  const marker = join(dir, 'ran');
  const workdir = await tempDir('conductor-services-shell-work-');
  const f = await Fixture.create(
    stack,
    'services-shell',
    `  test:
    services:
      db: {image: postgres:16}
      cache: {image: redis:7}
    script: ['touch ${marker}']
`,
  );
  await f.runner({ workdir });
  const jobId = await f.trigger();
  const task = (await f.finished(jobId)).tasks[0]!;
  assert.deepEqual(
    { state: task.state, attempt: task.attempt, exit_code: task.exit_code },
    { state: 'failed', attempt: 1, exit_code: null },
    'not transient: not retried',
  );
  assert.match(
    task.error ?? '',
    /^this task has services \(db, cache\), which need the docker executor; this runner uses the shell executor/,
  );
  const log = await f.log(task.id);
  assert.match(log, /^\[conductor\] this task has services \(db, cache\)/m);
  assert.doesNotMatch(log, /checked out/, 'nothing was fetched');
  await assert.rejects(access(marker), { code: 'ENOENT' }, 'the script never ran');
  assert.deepEqual(await readdir(workdir), [], 'no workspace was made');
});

test("a service's log is cut to its last 64 KiB, and a container that cannot be removed is logged, not waited for", async () => {
  const dir = await fakeDockerDir();
  const service = (name: string, image: string) => ({
    name,
    image,
    env: {},
    ports: [],
    health: null,
    health_timeout_s: 60,
  });
  const task = {
    id: '0b7e3c1a-5d6f-4e21-9a8b-1c2d3e4f5a6b',
    services: [service('chatty', 'fake/chatty:1'), service('stuck', 'fake/stuck:1')],
    // Only what TaskServices reads of a task.
  } as unknown as Task;
  const services = new TaskServices(task, {
    command: join(dir, 'docker'),
    env: process.env as Record<string, string>,
  });
  const notes: string[] = [];
  await services.start(new AbortController().signal, (text) => notes.push(text));
  assert.deepEqual(notes, [
    'starting the service chatty (fake/chatty:1)',
    'starting the service stuck (fake/stuck:1)',
  ]);
  const logs = await services.logs();
  const [chatty, stuck] = logs.split(/^(?=--- service stuck)/m);
  assert.match(
    chatty!,
    /^--- service chatty \(fake\/chatty:1\) ---\n\[conductor\] the service's log is cut to its last 64 KiB\n/,
  );
  assert.ok(chatty!.length <= SERVICE_LOG_BYTES + 200, `${chatty!.length} characters`);
  assert.ok(chatty!.endsWith('chatty line 20000\n'), 'the end of the log is kept');
  assert.equal(
    stuck,
    '--- service stuck (fake/stuck:1) ---\nfake/stuck:1 starting\nfake/stuck:1 ready\n',
  );

  const warnings: Array<{ message: string; fields: Record<string, unknown> }> = [];
  await services.remove((message, fields) => warnings.push({ message, fields }));
  assert.equal(warnings.length, 1, JSON.stringify(warnings));
  assert.equal(warnings[0]!.message, 'could not remove the service containers of a task');
  assert.match(
    String(warnings[0]!.fields.output),
    /cannot remove container .*-stuck: device or resource busy/,
  );
});
