// How the runner claims (issues #28 and #35): a claim whose reply is lost is
// repeated with the same Idempotency-Key and answered the same attempt; a 503's
// Retry-After is waited for; a task of the other trust is failed unrun;
// --once runs one task of an ephemeral worker and exits.
import assert from 'node:assert/strict';
import { access, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { testStack } from '../helpers/stack.ts';
import { startHttpProxy } from './http-proxy.ts';
import { childRunner, Fixture, fakeDocker, tempDir, waitFor } from './support.ts';

const stack = await testStack(import.meta.filename);
const CLAIM = '/v1/runner/claim';

test('a claim whose reply is lost after the control plane granted it is repeated with the same Idempotency-Key, and the task runs once, as attempt 1', async () => {
  const f = await Fixture.create(
    stack,
    'lost-claim',
    '  once:\n    script: [\'echo "ran on attempt $CONDUCTOR_ATTEMPT"\']\n',
  );
  let lost = false;
  const proxy = await startHttpProxy(stack.url, (req, status) => {
    if (req.path.split('?')[0] !== CLAIM || status !== 200 || lost) return undefined;
    lost = true;
    return 'drop';
  });
  // Queued before the runner starts, so that its first claim is granted.
  const jobId = await f.trigger();
  await f.runner({ url: proxy.url });
  const view = await f.finished(jobId);
  const task = view.tasks[0]!;
  assert.deepEqual(
    { state: task.state, attempt: task.attempt, error: task.error },
    { state: 'success', attempt: 1, error: null },
  );
  assert.equal((await f.log(task.id)).match(/^ran on attempt 1$/gm)?.length, 1);

  // The claim after the repeat is a new one.
  const claims = await waitFor('two claims after the lost one', () => {
    const c = proxy.passed.filter((p) => p.path.split('?')[0] === CLAIM);
    const i = c.findIndex((p) => p.dropped);
    return i >= 0 && c.length >= i + 3 ? { c, i } : undefined;
  });
  const [dropped, repeat, next] = claims.c.slice(claims.i, claims.i + 3);
  assert.deepEqual(
    [dropped!.status, repeat!.status],
    [200, 200],
    'the repeat is answered the grant',
  );
  assert.ok(dropped!.key && dropped!.key.length <= 200, dropped!.key);
  assert.equal(repeat!.key, dropped!.key);
  assert.notEqual(next!.key, dropped!.key);
  // Every claim that was answered ended its key: no two answered claims share one.
  const answered = claims.c.filter((p) => !p.dropped && p.status !== 0).map((p) => p.key);
  assert.equal(new Set(answered).size, answered.length);
});

test("a claim answered 503 is repeated with the same key after the Retry-After it asks for, held within the runner's backoff", async () => {
  const f = await Fixture.create(stack, 'busy-claim', "  one:\n    script: ['true']\n");
  const proxy = await startHttpProxy(stack.url, (req, status) =>
    req.path.split('?')[0] === CLAIM && req.index === 0 && status === undefined
      ? { status: 503, headers: { 'retry-after': '2' } }
      : undefined,
  );
  const jobId = await f.trigger();
  // Without Retry-After the next claim would follow within the first backoff (0.1 s).
  await f.runner({ url: proxy.url, pollMinMs: 100, pollMaxMs: 5_000 });
  assert.equal((await f.finished(jobId)).tasks[0]!.state, 'success');
  const [refused, repeat] = proxy.passed.filter((p) => p.path.split('?')[0] === CLAIM);
  assert.equal(refused!.status, 0, 'answered by the proxy');
  assert.equal(repeat!.key, refused!.key);
  assert.ok(repeat!.at - refused!.at >= 2_000, `${repeat!.at - refused!.at} ms`);
});

test('a runner started with --untrusted gives a trusted task back without running it and stops, and a runner without it an untrusted one', async () => {
  const dir = await tempDir('conductor-trust-');
  const marker = join(dir, 'ran');
  const f = await Fixture.create(
    stack,
    'trust-mismatch',
    `  deploy:\n    script: ['touch ${marker}']\n`,
  );
  /** The job's one task once its first attempt has ended (given back). */
  const givenBack = (jobId: string) =>
    waitFor(`the task of job ${jobId} given back`, async () => {
      const t = (await f.job(jobId)).tasks[0]!;
      return t.error ? t : undefined;
    });

  // The worker is registered trusted and the job is trusted (a manual
  // trigger): the runner's --untrusted does not match what the token is.
  const untrusted = await f.runner({ ...(await fakeDocker()), untrusted: true });
  const first = await f.trigger();
  const refused = await givenBack(first);
  await assert.rejects(untrusted.done, /^Error: this runner was started with --untrusted/);
  assert.deepEqual(
    { state: refused.state, attempt: refused.attempt, exit_code: refused.exit_code },
    { state: 'queued', attempt: 1, exit_code: null },
    'given back: queued again for a runner that matches its registration',
  );
  assert.match(
    refused.error ?? '',
    /^this runner was started with --untrusted and was handed a trusted task: a runner for untrusted code never runs trusted work.*; given back, and this runner stops$/,
  );
  assert.match(
    await f.log(refused.id, 1),
    /^\[conductor\] this runner was started with --untrusted/m,
  );
  assert.doesNotMatch(await f.log(refused.id, 1), /^\+ touch/m, 'the script never started');

  // The reverse needs a control plane that hands an untrusted task to a
  // worker that is not registered untrusted, which this one never does: the
  // claim's answer says so on its way to the runner.
  const saysUntrusted: typeof fetch = async (input, init) => {
    const res = await fetch(input, init);
    if (!new URL(String(input)).pathname.endsWith(CLAIM) || res.status !== 200) return res;
    const body = (await res.json()) as { task: { trusted?: boolean } };
    body.task.trusted = false;
    return new Response(JSON.stringify(body), { status: 200, headers: res.headers });
  };
  const second = await f.runner({ fetch: saysUntrusted });
  // It claims the first job's task (queued again) and gives it back too.
  const again = await waitFor('the second attempt given back', async () => {
    const t = (await f.job(first)).tasks[0]!;
    return t.attempt === 2 && t.state === 'queued' ? t : undefined;
  });
  await assert.rejects(second.done, /^Error: this runner was started without --untrusted/);
  assert.match(
    again.error ?? '',
    /^this runner was started without --untrusted and was handed an untrusted task.*; given back, and this runner stops$/,
  );
  await assert.rejects(access(marker), { code: 'ENOENT' }, 'neither runner ran the script');

  // A runner whose flag matches its registration then runs it.
  await f.runner();
  const done = await f.finished(first);
  assert.deepEqual(
    { state: done.tasks[0]!.state, attempt: done.tasks[0]!.attempt },
    { state: 'success', attempt: 3 },
  );
  await access(marker);
});

test('--once claims until a task comes, runs it, reports it and exits 0 whatever its outcome; the ephemeral token then claims nothing more (401)', async () => {
  const f = await Fixture.create(
    stack,
    'once',
    "  a:\n    script: ['exit 3']\n  b:\n    script: ['exit 3']\n",
  );
  const made = await stack.call('POST', '/v1/workers', {
    token: stack.adminToken,
    body: { name: 'once-ephemeral', labels: ['once'], ephemeral: true },
  });
  assert.equal(made.status, 201, made.text);
  const tokenFile = join(await tempDir('conductor-once-'), 'token');
  await writeFile(tokenFile, `${made.body.token}\n`, { mode: 0o600 });
  const args = ['--url', stack.url, '--token-file', tokenFile, '--poll-max-s', '0.3'];
  // The script writes nothing outside its workspace: the runner's user is fine.
  const runner = childRunner([...args, '--once', '--same-user']);
  // Polling first: nothing is queued yet.
  await waitFor('the runner to start', () =>
    runner.stderr().includes('"message":"runner started"') ? true : undefined,
  );
  const jobId = await f.trigger();
  const exit = await runner.exited;
  assert.deepEqual(exit, { code: 0, signal: null }, runner.stderr());
  const states = (await f.job(jobId)).tasks.map((t) => t.state).sort();
  assert.deepEqual(states, ['failed', 'queued'], 'one task run and failed, the other left');
  assert.match(runner.stderr(), /"message":"task finished".*"outcome":"failed"/);

  const again = childRunner([...args, '--once', '--same-user', '--log-format', 'text']);
  const refused = await again.exited;
  assert.equal(refused.code, 1, again.stderr());
  assert.match(
    again.stderr(),
    /^conductor-runner: the control plane refused the worker token \(POST \/v1\/runner\/claim: HTTP 401[^)]*\): .*an ephemeral worker's that has made its one claim/m,
  );
  // Its log is text with --log-format text, and the 401's remedy is said once.
  assert.match(again.stderr(), /^\d\d:\d\d:\d\d info {2}runner started \(version=/m);
  assert.match(
    again.stderr(),
    /^\d\d:\d\d:\d\d error the control plane refused the claim; the runner stops: POST \/v1\/runner\/claim: HTTP 401/m,
  );
  assert.doesNotMatch(again.stderr(), /^\{/m, 'no JSON line');
  assert.equal(again.stderr().split('put the new token there').length - 1, 1, again.stderr());
});
