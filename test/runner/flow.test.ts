// The runner against the real control plane: a DAG with a matrix and outputs,
// failures, secrets, cancel, timeout, and log uploads that fail and are retried.
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import type { RunnerEvent } from '../../runner/index.ts';
import { testStack } from '../helpers/stack.ts';
import { Fixture, groupAlive, tempDir, waitFor } from './support.ts';

// A short lease: heartbeats, and so cancels, arrive within a second.
const stack = await testStack(import.meta.filename, { CONDUCTOR_LEASE_S: '3' });

test('a fan-out/fan-in job with a matrix runs to success on two runners, outputs flowing downstream', async () => {
  const f = await Fixture.create(
    stack,
    'dag',
    `  build:
    image: node:20
    outputs: [version, notes]
    script:
      - echo "building $CONDUCTOR_TASK_NAME"
      - echo "version=1.2.$((40 + 2))" >> "$CONDUCTOR_OUTPUT"
      - printf 'notes<<END\\nline one\\nline two\\nEND\\n' >> "$CONDUCTOR_OUTPUT"
  test:
    needs: [build]
    matrix:
      node: [18, "20"]
    script:
      - cd sub
      - echo "node $CONDUCTOR_MATRIX_NODE in $(basename "$PWD") uses $CONDUCTOR_NEEDS_BUILD_VERSION"
  lint:
    needs: [build]
    env:
      GREETING: hello
    script:
      - env | sort
  publish:
    needs: [build, test, lint]
    script:
      - echo "publishing $CONDUCTOR_NEEDS_BUILD_VERSION"
      - test "$CONDUCTOR_NEEDS_BUILD_NOTES" = "$(printf 'line one\\nline two')"
`,
    { 'sub/README': 'a directory the script changes into\n' },
  );
  const events: RunnerEvent[] = [];
  const onEvent = (e: RunnerEvent) => events.push(e);
  const runners = [await f.runner({ onEvent }), await f.runner({ onEvent })];
  const jobId = await f.trigger();

  const view = await f.finished(jobId);
  assert.equal(view.job.state, 'success');
  assert.deepEqual(
    view.tasks.map((t) => [t.name, t.state]),
    [
      ['build', 'success'],
      ['test (node: 18)', 'success'],
      ['test (node: 20)', 'success'],
      ['lint', 'success'],
      ['publish', 'success'],
    ],
  );
  const build = view.tasks[0]!;
  assert.deepEqual(build.outputs, { version: '1.2.42', notes: 'line one\nline two' });
  assert.match(
    await f.log(build.id),
    /the shell executor ignores the image "node:20": the script runs on this host/,
  );
  assert.match(await f.log(view.tasks[1]!.id), /^node 18 in sub uses 1\.2\.42$/m);
  assert.match(await f.log(view.tasks[2]!.id), /^node 20 in sub uses 1\.2\.42$/m);
  const publish = await f.log(view.tasks[4]!.id);
  assert.match(
    publish,
    /^\+ echo "publishing \$CONDUCTOR_NEEDS_BUILD_VERSION"\npublishing 1\.2\.42$/m,
  );

  // What a script sees: the task's variables, and neither the runner's token
  // nor the control plane's address.
  const env = await f.log(view.tasks[3]!.id);
  for (const line of [
    'CI=true',
    'GREETING=hello',
    `CONDUCTOR_JOB_ID=${jobId}`,
    `CONDUCTOR_TASK_ID=${view.tasks[3]!.id}`,
    'CONDUCTOR_TASK_NAME=lint',
    `CONDUCTOR_SHA=${f.repo.sha}`,
    'CONDUCTOR_REF=refs/heads/main',
    'CONDUCTOR_ATTEMPT=1',
    'CONDUCTOR_NEEDS_BUILD_VERSION=1.2.42',
  ]) {
    assert.ok(env.split('\n').includes(line), `the script sees ${line}`);
  }
  assert.match(env, /^CONDUCTOR_OUTPUT=\/.+\/output$/m);
  assert.ok(!env.includes(f.token), 'the worker token is not passed on');
  assert.ok(!env.includes(stack.url), 'the control plane URL is not passed on');
  // Built from scratch: nothing else of this process's environment (DATABASE_URL, npm's...).
  const names = env.split('\n').flatMap((l) => /^([A-Za-z_][A-Za-z0-9_]*)=/.exec(l)?.[1] ?? []);
  assert.deepEqual(
    names.sort(),
    [
      ...['CI', 'GREETING', 'HOME', 'LOGNAME', 'PATH', 'USER'],
      ...['LANG', 'LC_ALL', 'TZ'].filter((n) => process.env[n]),
      // What bash itself exports, and env's own path.
      ...['PWD', 'SHLVL', '_'],
      ...['JOB_ID', 'TASK_ID', 'TASK_NAME', 'SHA', 'REF', 'ATTEMPT', 'WORKSPACE', 'OUTPUT'].map(
        (n) => `CONDUCTOR_${n}`,
      ),
      // Where the needed tasks' artifacts are (docs/artifacts.md).
      'CONDUCTOR_ARTIFACTS',
      ...['VERSION', 'NOTES'].map((n) => `CONDUCTOR_NEEDS_BUILD_${n}`),
    ].sort(),
  );

  // The runners report a task after its completion was answered: wait for the last report.
  const finished = await waitFor('every task to be reported', () => {
    const done = events.filter((e) => e.type === 'task-finished');
    return done.length === 5 ? done : undefined;
  });
  assert.deepEqual(
    finished.map((e) => e.type === 'task-finished' && e.state),
    ['success', 'success', 'success', 'success', 'success'],
  );
  assert.deepEqual(
    finished.flatMap((e) => (e.type === 'task-finished' && e.job_state ? [e.job_state] : [])),
    ['success'],
    'the completion that settled the job says so, and only that one',
  );
  assert.ok(events.some((e) => e.type === 'log-chunk'));
  await Promise.all(runners.map((r) => r.stop()));
});

test('a failing line stops the script: the task fails with its exit code and is not retried', async () => {
  const f = await Fixture.create(
    stack,
    'fail',
    `  fails:
    script:
      - echo before
      - sh -c 'exit 3'
      - echo after
`,
  );
  const runner = await f.runner();
  const jobId = await f.trigger();
  const view = await f.finished(jobId);
  assert.equal(view.job.state, 'failed');
  const task = view.tasks[0]!;
  assert.equal(task.state, 'failed');
  assert.equal(task.exit_code, 3);
  assert.equal(task.attempt, 1, 'a script failure is not transient: no second attempt');
  assert.equal(task.error, "line 2 of the script exited with 3: sh -c 'exit 3'");
  const log = await f.log(task.id);
  assert.match(log, /\+ echo before\nbefore\n\+ sh -c 'exit 3'\n$/);
  const attempts = await stack.context.pool.query(
    'select transient, exit_code from task_attempts where task_id = $1',
    [task.id],
  );
  assert.deepEqual(attempts.rows, [{ transient: false, exit_code: 3 }]);
  await runner.stop();
});

test('a failing line is named by one numbering, the script as the pipeline writes it, in the error and in what the shell prints', async () => {
  // Why: the error said "line 3 of the script" while the shell's own message
  // beside it said "script.sh: line 18", counting the runner's wrapper.
  const f = await Fixture.create(
    stack,
    'lines',
    `  numbered:
    script:
      - echo one
      - |
        echo two
        no-such-command-here
        echo unreached
      - echo never
  unnamed:
    script:
      - set +e
      - |
        false
        exit 4
`,
  );
  const runner = await f.runner();
  const jobId = await f.trigger();
  const view = await f.finished(jobId);
  const byName = Object.fromEntries(view.tasks.map((t) => [t.name, t]));
  const numbered = byName.numbered!;
  assert.deepEqual(
    { state: numbered.state, exit_code: numbered.exit_code, error: numbered.error },
    {
      state: 'failed',
      exit_code: 127,
      error: 'line 3 of the script exited with 127: no-such-command-here',
    },
  );
  const log = await f.log(numbered.id);
  assert.match(log, /^script\.sh: line 3: no-such-command-here: command not found$/m, log);
  assert.doesNotMatch(log, /^(unreached|never)$/m);
  // Under set +e the shell does not say which command ended the block: the
  // error names the block's lines, numbered the same way.
  const unnamed = byName.unnamed!;
  assert.deepEqual(
    { exit_code: unnamed.exit_code, error: unnamed.error },
    { exit_code: 4, error: 'lines 2-3 of the script exited with 4: false' },
  );
  await runner.stop();
});

test('secret values, the clone token and its Authorization header are masked by the runner before they are sent', async () => {
  const secret = 'hunter2-correct-horse';
  // The repository is a local path, so git never sends it; the runner masks it all the same.
  const cloneToken = 'ghs_clone_token_of_the_test';
  const basic = Buffer.from(`x-access-token:${cloneToken}`).toString('base64');
  const f = await Fixture.create(
    stack,
    'secret',
    `  deploy:
    secrets: [DEPLOY_KEY]
    script:
      - echo "the key is $DEPLOY_KEY"
      - printf 'and again %s' "$DEPLOY_KEY"
      - echo "clone ${cloneToken} header ${basic}"
`,
    {},
    { DEPLOY_KEY: secret },
  );
  const sent: string[] = [];
  const runner = await f.runner({
    fetch: async (input, init) => {
      if (String(input).endsWith('/logs')) sent.push(String(init?.body));
      const res = await fetch(input, init);
      if (!new URL(String(input)).pathname.endsWith('/claim') || res.status !== 200) return res;
      // A trusted task of a project with a forge token carries a clone token.
      const answer = (await res.json()) as { task: { repo: { token?: string } } };
      answer.task.repo.token = cloneToken;
      return new Response(JSON.stringify(answer), {
        status: 200,
        headers: { 'content-type': 'application/json', date: res.headers.get('date') ?? '' },
      });
    },
  });
  const jobId = await f.trigger();
  const view = await f.finished(jobId);
  assert.equal(view.job.state, 'success');
  const log = await f.log(view.tasks[0]!.id);
  assert.match(log, /\+ echo "the key is \$DEPLOY_KEY"\nthe key is \*\*\*\n/);
  assert.match(log, /and again \*\*\*/);
  assert.match(log, /^clone \*\*\* header \*\*\*$/m);
  assert.ok(sent.length > 0);
  for (const body of sent) {
    for (const hidden of [secret, cloneToken, basic]) {
      assert.ok(
        !body.includes(hidden),
        'no upload carries the secret, the clone token or its header',
      );
    }
  }
  await runner.stop();
});

test('cancelling a job kills the running script and everything it started', async () => {
  const dir = await tempDir('conductor-runner-cancel-');
  const f = await Fixture.create(
    stack,
    'cancel',
    `  slow:
    script:
      - echo $$ > "${dir}/pid"
      - sleep 30 && echo late
      - touch "${dir}/marker"
`,
  );
  const events: RunnerEvent[] = [];
  const runner = await f.runner({ onEvent: (e) => events.push(e) });
  const jobId = await f.trigger();
  const pid = await waitFor('the script to start', () => {
    const text = existsSync(join(dir, 'pid')) ? readFileSync(join(dir, 'pid'), 'utf8') : '';
    return text.endsWith('\n') ? Number(text) : undefined;
  });
  assert.ok(groupAlive(pid));

  const cancel = await stack.call('POST', `/v1/jobs/${jobId}/cancel`, { token: stack.adminToken });
  assert.equal(cancel.status, 200, cancel.text);
  const finished = await waitFor('the runner to report', () =>
    events.find((e) => e.type === 'task-finished'),
  );
  assert.equal(finished.type === 'task-finished' && finished.outcome, 'cancelled');
  const task = await f.task(jobId, 'slow');
  assert.equal(task.state, 'cancelled');
  // The whole process group is gone, the sleep with it: nothing is left that
  // could write the marker.
  await waitFor('the process group to go', () => (groupAlive(pid) ? undefined : true), 10_000);
  assert.equal(existsSync(join(dir, 'marker')), false);
  assert.match(await f.log(task.id), /\[conductor\] the job was cancelled: stopping the script\n$/);
  await runner.stop();
});

test('a script past its timeout is killed and the task fails as timed out', async () => {
  const f = await Fixture.create(
    stack,
    'timeout',
    `  hangs:
    timeout: 2s
    script: [sleep 30]
`,
  );
  const runner = await f.runner();
  const jobId = await f.trigger();
  const view = await f.finished(jobId);
  const task = view.tasks[0]!;
  assert.equal(task.state, 'failed');
  assert.equal(task.error, 'timed out after 2s');
  assert.equal(task.attempt, 1);
  assert.match(await f.log(task.id), /\[conductor\] timed out after 2s: stopping the script\n$/);
  await runner.stop();
});

test('log uploads that fail before or after the server stored them are retried, each byte stored once', async () => {
  // Several 64 KiB chunks, with characters of every UTF-8 length, so chunk
  // boundaries fall inside characters and must be moved.
  const lines: string[] = [];
  for (let i = 0; i < 8000; i++) lines.push(`${i} héllo wörld 日本語 🎉 ${'x'.repeat(i % 37)}`);
  const content = `${lines.join('\n')}\n`;
  const f = await Fixture.create(stack, 'flaky-logs', '  print:\n    script: [cat big.txt]\n', {
    'big.txt': content,
  });

  const seen = new Set<number>();
  const injected = { after: 0, before: 0, unavailable: 0 };
  const runner = await f.runner({
    fetch: async (input, init) => {
      if (!String(input).endsWith('/logs')) return fetch(input, init);
      const offset = JSON.parse(String(init?.body)).offset as number;
      if (seen.has(offset)) return fetch(input, init);
      seen.add(offset);
      switch (seen.size % 3) {
        case 1: {
          // The server stores the chunk; the answer is lost on the way back.
          const res = await fetch(input, init);
          await res.text();
          injected.after++;
          throw new TypeError('fetch failed (injected after the server stored the chunk)');
        }
        case 2:
          injected.before++;
          throw new TypeError('fetch failed (injected before the request left)');
        default:
          injected.unavailable++;
          return new Response('{"message":"Service Unavailable"}', { status: 503 });
      }
    },
  });
  const jobId = await f.trigger();
  const view = await f.finished(jobId);
  assert.equal(view.job.state, 'success');
  // About seven chunks: each kind of failure happened at least twice.
  assert.ok(
    Object.values(injected).every((n) => n >= 2),
    JSON.stringify(injected),
  );

  const expected =
    `[conductor] checked out ${f.repo.sha} (refs/heads/main) from ${f.repo.dir}\n` +
    `+ cat big.txt\n${content}`;
  const res = await stack.call('GET', `/v1/tasks/${view.tasks[0]!.id}/log`, {
    token: stack.adminToken,
  });
  assert.equal(res.text, expected);
  assert.equal(Number(res.headers.get('x-log-size')), Buffer.byteLength(expected));
  await runner.stop();
});

test('a task whose repository cannot be fetched fails as transient and is retried until its attempts run out', async () => {
  const f = await Fixture.create(
    stack,
    'clone',
    '  build:\n    retries: 1\n    script: [echo never]\n',
  );
  const jobId = await f.trigger();
  // The runner clones what the project says at claim time.
  const moved = await stack.call('PATCH', `/v1/projects/${f.project}`, {
    token: stack.adminToken,
    body: { repo_url: join(f.repo.dir, 'does-not-exist') },
  });
  assert.equal(moved.status, 200, moved.text);
  const runner = await f.runner();
  const view = await f.finished(jobId);
  const task = view.tasks[0]!;
  assert.equal(task.state, 'failed');
  assert.equal(task.attempt, 2, 'the first failure was transient: a second attempt ran');
  assert.match(task.error ?? '', /^fetching refs\/heads\/main from .*does-not-exist failed: /);
  const attempts = await stack.context.pool.query(
    'select transient from task_attempts where task_id = $1 order by attempt',
    [task.id],
  );
  assert.deepEqual(attempts.rows, [{ transient: true }, { transient: true }]);
  assert.match(await f.log(task.id), /\[conductor\] fetching refs\/heads\/main from /);
  await runner.stop();
});

test('a 409 on heartbeat means the lease is lost: the script is killed and nothing is reported', async () => {
  const dir = await tempDir('conductor-runner-lost-');
  const f = await Fixture.create(
    stack,
    'lease-lost',
    `  held:
    script:
      - echo $$ > "${dir}/pid"
      - sleep 30
`,
  );
  let lose = false;
  const completes: string[] = [];
  const events: RunnerEvent[] = [];
  const runner = await f.runner({
    onEvent: (e) => events.push(e),
    fetch: async (input, init) => {
      const url = String(input);
      if (url.endsWith('/complete')) completes.push(url);
      if (lose && url.endsWith('/heartbeat')) {
        return Response.json({ error: { code: 'conflict', message: 'lease' } }, { status: 409 });
      }
      return fetch(input, init);
    },
  });
  const jobId = await f.trigger();
  const pid = await waitFor('the script to start', () => {
    const text = existsSync(join(dir, 'pid')) ? readFileSync(join(dir, 'pid'), 'utf8') : '';
    return text.endsWith('\n') ? Number(text) : undefined;
  });
  lose = true;
  const finished = await waitFor('the runner to give up the task', () =>
    events.find((e) => e.type === 'task-finished'),
  );
  assert.equal(finished.type === 'task-finished' && finished.outcome, 'lost');
  await waitFor('the script to be gone', () => (groupAlive(pid) ? undefined : true), 10_000);
  assert.deepEqual(completes, [], 'no completion was sent');
  assert.equal((await f.task(jobId, 'held')).state, 'running', 'the sweep will deal with it');
  await runner.stop();
  await stack.call('POST', `/v1/jobs/${jobId}/cancel`, { token: stack.adminToken });
});

test('a runner that cannot heartbeat for a whole lease stops the script and gives the task back', async () => {
  const dir = await tempDir('conductor-runner-offline-');
  const f = await Fixture.create(
    stack,
    'offline',
    `  work:
    script:
      - echo $$ > "${dir}/pid-$CONDUCTOR_ATTEMPT"
      - if [ "$CONDUCTOR_ATTEMPT" = 1 ]; then sleep 30; fi
      - echo "done on attempt $CONDUCTOR_ATTEMPT"
`,
  );
  let offline = false;
  const runner = await f.runner({
    fetch: async (input, init) => {
      if (offline && String(input).endsWith('/heartbeat')) throw new TypeError('fetch failed');
      return fetch(input, init);
    },
  });
  const jobId = await f.trigger();
  await waitFor('the script to start', () => (existsSync(join(dir, 'pid-1')) ? true : undefined));
  offline = true;
  const task = await waitFor('the task to be given back', async () => {
    const t = await f.task(jobId, 'work');
    return t.attempt === 1 && t.state === 'running' ? undefined : t;
  });
  offline = false;
  const attempts = await stack.context.pool.query(
    'select transient, error from task_attempts where task_id = $1 and attempt = 1',
    [task.id],
  );
  assert.deepEqual(attempts.rows, [
    { transient: true, error: 'the runner lost its connection to the control plane' },
  ]);
  const view = await f.finished(jobId);
  assert.equal(view.job.state, 'success');
  assert.equal(view.tasks[0]!.attempt, 2);
  await runner.stop();
});
