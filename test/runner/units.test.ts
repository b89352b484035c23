// The runner's pure parts: the docker command line, the script environment,
// the wrapper script (run with a real bash), outputs, log chunking and retries.
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { formatDuration } from '../../lib/duration.ts';
import { Masker } from '../../lib/masking.ts';
import { Backoff } from '../../runner/backoff.ts';
import { parseRunnerArgs } from '../../runner/cli.ts';
import { HttpStatusError, newClaimKey, parseRetryAfter, retryDelay } from '../../runner/client.ts';
import { exportFile, scriptEnvironment, taskVariables, toolEnvironment } from '../../runner/env.ts';
import { fetchUrl, gitEnvironment, mayCarryToken, redactUrl } from '../../runner/git.ts';
import {
  containerName,
  dockerRunArgs,
  optionConflict,
  startRunner,
  type Task,
} from '../../runner/index.ts';
import { chooseLogFormat, textLine } from '../../runner/logformat.ts';
import { chunkEnd, LogStream } from '../../runner/logstream.ts';
import { parseOutputs } from '../../runner/outputs.ts';
import {
  ENV_FAILED_STATUS,
  parseLineFile,
  scriptLines,
  wrapperScript,
} from '../../runner/script.ts';
import { trustRefusal } from '../../runner/task.ts';
import { readTaskFile } from '../../runner/taskfile.ts';
import { tempDir, waitFor } from './support.ts';

function task(over: Partial<Task> = {}): Task {
  return {
    id: '0b7e3c1a-5d6f-4e21-9a8b-1c2d3e4f5a6b',
    job_id: '9f8e7d6c-5b4a-4321-8fed-cba987654321',
    name: 'test (node: 20, os: linux)',
    lease_id: '11111111-2222-4333-8444-555555555555',
    attempt: 2,
    max_attempts: 3,
    lease_expires_at: new Date().toISOString(),
    image: 'node:20',
    script: ['npm test'],
    env: { NODE_ENV: 'test', CONDUCTOR_TASK_NAME: 'spoofed' },
    secrets: { NPM_TOKEN: 'npm_secret_value' },
    matrix: { node: '20', 'os-name': 'linux' },
    needs_outputs: { 'build-app': { version: '1.2.3' }, 'v1.2': { _out_: 'x' } },
    timeout_s: 60,
    services: [],
    repo: {
      url: 'https://forge.example/acme/app.git',
      sha: 'a'.repeat(40),
      ref: 'refs/heads/main',
    },
    ...over,
  };
}

test('the docker command line mounts the workspace, names the container and keeps the environment off it', () => {
  const t = task();
  const name = containerName(t);
  assert.equal(name, `conductor-${t.id}-2`);
  assert.deepEqual(
    dockerRunArgs({ name, image: 'node:20', workspace: '/w/ws', metaDir: '/w/meta' }),
    [
      'run',
      '--rm',
      '--init',
      '--name',
      name,
      '--mount',
      'type=bind,source=/w/ws,target=/workspace',
      '--mount',
      'type=bind,source=/w/meta,target=/conductor',
      '--workdir',
      '/workspace',
      '--entrypoint',
      'sh',
      'node:20',
      '-c',
      'if command -v bash >/dev/null 2>&1; then exec bash /conductor/script.sh; else exec sh /conductor/script.sh; fi',
    ],
  );
});

test('startRunner with --executor docker rejects when the docker CLI is missing', async () => {
  await assert.rejects(
    startRunner({
      url: 'http://127.0.0.1:1',
      token: 't',
      executor: 'docker',
      dockerCommand: '/nonexistent/docker',
      workdir: await tempDir('conductor-runner-unit-'),
    }),
    /--executor docker needs a Docker engine, but `\/nonexistent\/docker info` failed: .*ENOENT/,
  );
});

test('a script sees CONDUCTOR_ variables built with the env-fragment rule, which the pipeline cannot override', () => {
  const vars = taskVariables(task(), { workspace: '/ws', outputFile: '/meta/output' });
  assert.deepEqual(vars, {
    CI: 'true',
    NODE_ENV: 'test',
    NPM_TOKEN: 'npm_secret_value',
    CONDUCTOR_TASK_NAME: 'test (node: 20, os: linux)',
    CONDUCTOR_JOB_ID: '9f8e7d6c-5b4a-4321-8fed-cba987654321',
    CONDUCTOR_TASK_ID: '0b7e3c1a-5d6f-4e21-9a8b-1c2d3e4f5a6b',
    CONDUCTOR_SHA: 'a'.repeat(40),
    CONDUCTOR_REF: 'refs/heads/main',
    CONDUCTOR_ATTEMPT: '2',
    CONDUCTOR_WORKSPACE: '/ws',
    CONDUCTOR_OUTPUT: '/meta/output',
    CONDUCTOR_MATRIX_NODE: '20',
    CONDUCTOR_MATRIX_OS_NAME: 'linux',
    CONDUCTOR_NEEDS_BUILD_APP_VERSION: '1.2.3',
    CONDUCTOR_NEEDS_V1_2_OUT: 'x',
  });
});

test("git's and docker's environment loses the runner's own variables, anything holding its token, and git's location", () => {
  const env = toolEnvironment(
    {
      PATH: '/usr/bin',
      HOME: '/root',
      CONDUCTOR_RUNNER_TOKEN: 'cw_abc',
      CONDUCTOR_URL: 'http://cp',
      SOMETHING: 'Bearer cw_abc',
      NOTE: 'see http://cp/v1',
      GIT_DIR: '/elsewhere/.git',
      GIT_AUTHOR_NAME: 'kept',
    },
    ['cw_abc', 'http://cp'],
  );
  assert.deepEqual(env, { PATH: '/usr/bin', HOME: '/root', GIT_AUTHOR_NAME: 'kept' });
});

test("a script's environment is built from scratch: PATH, LANG, LC_ALL and TZ from the runner's, HOME, USER and LOGNAME of the user it runs as", () => {
  const runner = {
    PATH: '/opt/bin:/usr/bin',
    HOME: '/root',
    USER: 'root',
    LANG: 'C.UTF-8',
    TZ: 'UTC',
    AWS_SECRET_ACCESS_KEY: 'from the host',
    SSH_AUTH_SOCK: '/tmp/agent',
    CONDUCTOR_RUNNER_TOKEN: 'cw_abc',
  };
  assert.deepEqual(
    scriptEnvironment(runner, { name: 'build', home: '/var/lib/build' }, ['cw_abc']),
    {
      PATH: '/opt/bin:/usr/bin',
      LANG: 'C.UTF-8',
      TZ: 'UTC',
      HOME: '/var/lib/build',
      USER: 'build',
      LOGNAME: 'build',
    },
  );
  // No PATH of its own: a usual one; a passed variable holding the token is left out.
  assert.deepEqual(scriptEnvironment({ LANG: 'x cw_abc' }, { name: 'u', home: '/' }, ['cw_abc']), {
    PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
    HOME: '/',
    USER: 'u',
    LOGNAME: 'u',
  });
});

test('the docker environment file survives quotes and newlines when sourced', async () => {
  const dir = await tempDir('conductor-runner-unit-');
  const file = join(dir, 'env.sh');
  const tricky = 'it\'s "quoted"\nand $(not run) `either`';
  writeFileSync(file, exportFile({ A: tricky, 'not-a-name': 'x' }));
  const out = execFileSync('sh', ['-c', `. "${file}"; printf '%s' "$A"`]).toString();
  assert.equal(out, tricky);
});

test('a script that cannot read its environment file does not run, under bash and sh: it says why and exits 78 with its line file empty; one that can reads it and deletes it', async () => {
  for (const shell of ['bash', 'sh', 'busybox']) {
    const dir = await tempDir('conductor-runner-unit-');
    const envFile = join(dir, 'env.sh');
    const lineFile = join(dir, 'line');
    writeFileSync(lineFile, '');
    const script = join(dir, 'script.sh');
    writeFileSync(
      script,
      wrapperScript(['echo "the script ran with [$SECRET]"'], { envFile, lineFile }),
    );
    const args = shell === 'busybox' ? ['sh', script] : [script];
    const missing = spawnSync(shell, args, { cwd: dir, encoding: 'utf8' });
    assert.equal(missing.status, ENV_FAILED_STATUS, `${shell}: ${missing.stdout}`);
    assert.equal(
      missing.stdout,
      `[conductor] the task's environment ${envFile} cannot be read by the container's user (uid ${process.getuid?.()}): the script does not run without it\n`,
      shell,
    );
    assert.equal(readFileSync(lineFile, 'utf8'), '', shell);

    writeFileSync(envFile, exportFile({ SECRET: 's3' }), { mode: 0o600 });
    const present = spawnSync(shell, args, { cwd: dir, encoding: 'utf8' });
    assert.equal(present.status, 0, `${shell}: ${present.stdout}`);
    assert.match(present.stdout, /^the script ran with \[s3\]$/m, shell);
    assert.equal(existsSync(envFile), false, `${shell}: the file is deleted`);
  }
});

function runWrapper(lines: string[], dir: string, shell = 'bash') {
  const lineFile = join(dir, 'line');
  const script = join(dir, 'script.sh');
  writeFileSync(script, wrapperScript(lines, { lineFile }));
  // Relative, as the shell executor runs it: the shell then names it `script.sh`.
  const res = spawnSync(shell, ['script.sh'], { cwd: dir, encoding: 'utf8' });
  return { code: res.status, out: res.stdout, line: readFileSync(lineFile, 'utf8').trim() };
}

test('the wrapper echoes each line, keeps the shell between lines and stops at the first failing one', async () => {
  const dir = await tempDir('conductor-runner-unit-');
  const ok = runWrapper(
    ['X=1; mkdir -p sub', 'cd sub', 'echo "$X in $(basename "$PWD")" >&2'],
    dir,
  );
  assert.deepEqual(ok, {
    code: 0,
    out: '+ X=1; mkdir -p sub\n+ cd sub\n+ echo "$X in $(basename "$PWD")" >&2\n1 in sub\n',
    line: '0',
  });
  const failed = runWrapper(['echo one', 'false; echo unreached', 'echo two'], dir);
  assert.deepEqual(failed, {
    code: 1,
    out: '+ echo one\none\n+ false; echo unreached\n',
    line: '2 2',
  });
  // set +e in one line does not let a later failing line through; which
  // command failed is not named, since under set +e it may not be the cause.
  const optedOut = runWrapper(['set +e', 'exit 4', 'echo no'], dir);
  assert.equal(optedOut.code, 4);
  assert.equal(optedOut.line, '2');
  const pipe = runWrapper(['false | cat'], dir);
  assert.equal(pipe.code, 1, 'pipefail');
  const syntax = runWrapper(['echo fine', 'if then', 'echo no'], dir);
  assert.equal(syntax.code, 2);
  assert.equal(syntax.line, '2');
  assert.match(syntax.out, /^script\.sh: eval: line 2: syntax error/m);
  const multi = runWrapper(["printf '%s\\n' \\\n  a b"], dir);
  assert.equal(multi.out, "+ printf '%s\\n' \\\n+   a b\na\nb\n");
  // A YAML block's closing newline adds no line.
  const block = runWrapper(['echo a\necho b\n', 'echo c'], dir);
  assert.equal(block.out, '+ echo a\n+ echo b\na\nb\n+ echo c\nc\n');
});

test('the script is numbered as the pipeline writes it, in the line file and in what the shell prints, under bash and under sh', async () => {
  // Why: the error said "line 3 of the script" while the shell said
  // "script.sh: line 18", counting the wrapper's own lines.
  const dir = await tempDir('conductor-runner-unit-');
  const script = [
    'echo one',
    'for i in 1 2; do\n  echo "$i"\ndone\n',
    'echo "it\'s"\nno-such-command-here\necho unreached',
  ];
  assert.deepEqual(scriptLines(script), [
    { first: 1, last: 1 },
    { first: 2, last: 4 },
    { first: 5, last: 7 },
  ]);
  const bash = runWrapper(script, dir);
  assert.equal(bash.code, 127);
  assert.equal(bash.line, '3 6', 'entry 3, and its line 6 failed');
  assert.match(bash.out, /^script\.sh: line 6: no-such-command-here: command not found$/m);
  assert.doesNotMatch(bash.out, /^unreached$/m);
  assert.deepEqual(parseLineFile(`${bash.line}\n`), { entry: 3, line: 6 });

  // dash: no ERR trap, so only the entry; but its message counts the same lines.
  const sh = runWrapper(script, dir, 'dash');
  assert.equal(sh.code, 127);
  assert.equal(sh.line, '3');
  assert.match(sh.out, /^script\.sh: 6: eval: no-such-command-here: not found$/m);
  assert.deepEqual(parseLineFile(sh.line), { entry: 3, line: undefined });
  // dash has no pipefail: the wrapper must still run there (a bad `set -o`
  // ends a POSIX shell whatever `|| true` follows).
  assert.equal(
    runWrapper(['false | cat', 'echo ran'], dir, 'dash').out,
    '+ false | cat\n+ echo ran\nran\n',
  );

  // A failing function's body is outside the ERR trap (no errtrace): only
  // the entry that called it is named, never a line of another entry.
  const fn = runWrapper(['f() {\n  false\n}', 'f'], dir);
  assert.deepEqual({ code: fn.code, line: fn.line }, { code: 1, line: '2' });
});

test('outputs are name=value lines or name<<DELIMITER blocks; anything else is an error naming the line, never quoting the file', () => {
  assert.deepEqual(parseOutputs('a=1\n\nb=x=y\r\nc<<EOF\none\ntwo\nEOF\na=2\nd=\n'), {
    a: '2',
    b: 'x=y',
    c: 'one\ntwo',
    d: '',
  });
  assert.deepEqual(parseOutputs('e=a<<b\n'), { e: 'a<<b' });
  // Under the docker executor the file may hold what a container linked to:
  // an error names the line, and quotes none of it.
  assert.throws(() => parseOutputs('ok=1\nhost secret text\n'), {
    name: 'OutputsError',
    message: /^\$CONDUCTOR_OUTPUT line 2: expected name=value or name<<DELIMITER$/,
  });
  assert.throws(() => parseOutputs('ok=1\nhost-secret=1'), {
    message:
      /^\$CONDUCTOR_OUTPUT line 2: not a valid output name \(letters, digits and _, not starting with a digit\)$/,
  });
  assert.throws(() => parseOutputs('x<<HOST_SECRET\nno end\n'), {
    name: 'OutputsError',
    message: /^\$CONDUCTOR_OUTPUT line 1: the delimiter that ends this value is missing$/,
  });
});

test('a file the runner reads after a task is read only when it is a regular file within the cap: a link, a FIFO or a device fails at once, naming the file and not its content', async () => {
  const dir = await tempDir('conductor-runner-taskfile-');
  const secret = join(dir, 'host-secret');
  writeFileSync(secret, 'HOST_SECRET=do-not-read\n');
  const at = (name: string) => join(dir, name);
  writeFileSync(at('output'), 'a=1\n');
  assert.equal(await readTaskFile(at('output'), '$CONDUCTOR_OUTPUT', 16), 'a=1\n');
  assert.equal(await readTaskFile(at('absent'), 'the line file', 16, ''), '');
  await assert.rejects(readTaskFile(at('absent'), '$CONDUCTOR_OUTPUT', 16), {
    message: '$CONDUCTOR_OUTPUT is missing',
  });
  writeFileSync(at('big'), 'x'.repeat(17));
  await assert.rejects(readTaskFile(at('big'), '$CONDUCTOR_OUTPUT', 16), {
    message: '$CONDUCTOR_OUTPUT holds more than 16 bytes, the most the runner reads',
  });
  execFileSync('ln', ['-s', secret, at('link')]);
  execFileSync('mkfifo', [at('fifo')]);
  const refused = [
    ['link', 'a symbolic link'],
    ['fifo', 'a named pipe (FIFO)'],
    ['device', 'a character device'],
  ] as const;
  for (const [name, kind] of refused) {
    const path = name === 'device' ? '/dev/zero' : at(name);
    // A FIFO with no writer would block a plain read forever: this answers at once.
    const err = await readTaskFile(path, '$CONDUCTOR_OUTPUT', 1024).then(
      () => assert.fail(`${name} was read`),
      (e: Error) => e,
    );
    assert.equal(
      err.message,
      `$CONDUCTOR_OUTPUT is ${kind}, not a regular file: the runner reads only a regular file there`,
    );
    assert.doesNotMatch(err.message, /do-not-read/);
  }
});

test('chunks end on a UTF-8 character boundary, after a newline when one is near', () => {
  const buf = Buffer.from('ab\ncd€fg', 'utf8'); // € is 3 bytes at 5..7
  assert.equal(chunkEnd(buf, 100), buf.length);
  assert.equal(chunkEnd(buf, 6), 3, 'the newline in the second half of the window wins');
  const noNewline = Buffer.from('abcd€fg', 'utf8'); // € at 4..6
  assert.equal(chunkEnd(noNewline, 5), 4);
  assert.equal(chunkEnd(noNewline, 6), 4);
  assert.equal(chunkEnd(noNewline, 7), 7);
});

test('masking covers each secret and each line of a secret that spans lines, longest first', () => {
  const masker = new Masker(['abc', 'abcdef', 'line-one\nline-two', 'abcd']);
  assert.deepEqual(
    masker.forms.filter((f) => /^[a-z-]+(\n[a-z-]+)?$/.test(f)),
    ['line-one\nline-two', 'line-one', 'line-two', 'abcdef', 'abcd'],
    'values shorter than 4 characters are not masked',
  );
  assert.equal(masker.mask('abcdef abcd abc line-two'), '*** *** abc ***');
});

/** A sink that stores like the control plane: a chunk at a stored offset is kept once. */
function fakeServer() {
  let stored = Buffer.alloc(0);
  return {
    text: () => stored.toString('utf8'),
    store(offset: number, data: string): number {
      const bytes = Buffer.from(data, 'utf8');
      if (offset > stored.length) {
        throw new HttpStatusError('POST', '/logs', 409, { size: stored.length });
      }
      if (offset + bytes.length > stored.length) {
        stored = Buffer.concat([stored, bytes.subarray(stored.length - offset)]);
      }
      return stored.length;
    },
  };
}

test('a log stream resends from its offset after failures, and every byte is stored once', async () => {
  const server = fakeServer();
  let calls = 0;
  const stream = new LogStream(
    async (offset, data) => {
      calls++;
      if (calls === 2) throw new HttpStatusError('POST', '/logs', 503, null);
      const size = server.store(offset, data);
      if (calls === 3) throw new HttpStatusError('POST', '/logs', 502, null); // stored, answer lost
      return size;
    },
    { flushMs: 10_000, chunkBytes: 10, masker: new Masker(['s3cret']) },
  );
  stream.write('hello wörld\n');
  stream.write('the s3cret is out\n');
  stream.write('no newline at the end');
  await stream.close(10_000);
  assert.equal(server.text(), 'hello wörld\nthe *** is out\nno newline at the end');
  assert.equal(stream.size, Buffer.byteLength(server.text()));
});

test('a partial line is sent after a flush interval, but never the start of a secret', async () => {
  const sent: string[] = [];
  const stream = new LogStream(
    async (offset, data) => {
      sent.push(data);
      return offset + Buffer.byteLength(data);
    },
    { flushMs: 20, chunkBytes: 1024, masker: new Masker(['supersecretvalue']) },
  );
  stream.write('the key: supers');
  await waitFor('the partial line to go', () => (sent.length > 0 ? true : undefined));
  assert.deepEqual(sent, ['the key: ']);
  stream.write('ecretvalue\n');
  await stream.close(5_000);
  assert.deepEqual(sent, ['the key: ', '***\n']);
  const masker = new Masker(['supersecretvalue', 'secretive']);
  assert.equal(masker.unsafeSuffixLength('x supersecret'), 11);
  assert.equal(masker.unsafeSuffixLength('x super\\u0073ecr'), 14, 'a JSON escape inside');
  assert.equal(masker.unsafeSuffixLength('x supersecret%7'), 13, 'the start of a URL escape');
  assert.equal(masker.unsafeSuffixLength('nothing here'), 0);
});

test('a log stream that is ahead of the control plane goes on from the size it is told', async () => {
  const server = fakeServer();
  server.store(0, 'abc');
  let first = true;
  const stream = new LogStream(
    async (offset, data) => {
      // Pretend the first three bytes were acknowledged but the server lost two of them.
      if (first) {
        first = false;
        return 3;
      }
      return server.store(offset === 3 ? 3 : offset, data);
    },
    { flushMs: 10_000, chunkBytes: 3, masker: new Masker([]) },
  );
  stream.write('abcdef\n');
  await stream.close(10_000);
  assert.equal(server.text(), 'abcdef\n');
});

test('a log stream stops uploading at the log limit and reports it once', async () => {
  const stopped: string[] = [];
  const stream = new LogStream(
    async () => {
      throw new HttpStatusError('POST', '/logs', 413, null);
    },
    {
      flushMs: 10_000,
      chunkBytes: 4,
      masker: new Masker([]),
      onStopped: (r) => stopped.push(r),
    },
  );
  stream.write('0123456789\n');
  await stream.close(5_000);
  assert.deepEqual(stopped, ['the log reached the control plane limit; the rest was not uploaded']);
});

test('polling backs off with jitter from about half a second up to its ceiling', () => {
  const b = new Backoff(500, 10_000, () => 0.5);
  assert.deepEqual(
    Array.from({ length: 7 }, () => b.next()),
    [500, 1000, 2000, 4000, 8000, 10_000, 10_000],
  );
  b.reset();
  assert.equal(b.next(), 500);
  const random = new Backoff(500, 10_000);
  for (let i = 0; i < 50; i++) {
    const d = random.next();
    assert.ok(d >= 400 && d <= 10_000, String(d));
  }
});

test('Retry-After is waited for within the backoff bounds; claim keys are fresh and fit the header', () => {
  const b = new Backoff(500, 10_000, () => 0.5);
  const unavailable = (after: number | undefined) =>
    new HttpStatusError('POST', '/v1/runner/claim', 503, null, after);
  assert.equal(retryDelay(unavailable(3_000), b), 3_000);
  assert.equal(retryDelay(unavailable(120_000), b), 10_000, 'held to the ceiling');
  assert.equal(retryDelay(unavailable(0), b), 500, 'held to the floor');
  b.reset();
  assert.equal(retryDelay(unavailable(undefined), b), 500, 'without it, the backoff');
  assert.equal(parseRetryAfter('7'), 7_000);
  assert.equal(parseRetryAfter('Wed, 21 Oct 2015 07:28:00 GMT'), undefined);
  assert.equal(parseRetryAfter(null), undefined);
  const keys = new Set(Array.from({ length: 100 }, newClaimKey));
  assert.equal(keys.size, 100);
  for (const key of keys) assert.ok(key.length >= 16 && key.length <= 200, key);
});

test('a runner runs only tasks of its trust: --untrusted refuses a trusted task, and a runner without it an untrusted one; a control plane that does not say is taken at its word', () => {
  assert.match(
    trustRefusal(true, true) ?? '',
    /^this runner was started with --untrusted and was handed a trusted task/,
  );
  assert.match(
    trustRefusal(false, false) ?? '',
    /^this runner was started without --untrusted and was handed an untrusted task/,
  );
  assert.equal(trustRefusal(true, false), undefined);
  assert.equal(trustRefusal(false, true), undefined);
  assert.equal(trustRefusal(undefined, true), undefined);
  assert.equal(trustRefusal(undefined, false), undefined);
});

test('timeouts read as the pipeline writes durations', () => {
  assert.equal(formatDuration(2), '2s');
  assert.equal(formatDuration(90), '1m30s');
  assert.equal(formatDuration(3600), '1h');
  assert.equal(formatDuration(604_800), '168h');
});

test('the clone token goes in a header through git config variables, and only where it may', () => {
  const repo = { url: 'https://forge.example/a/b.git', sha: 'a'.repeat(40), ref: 'main' };
  const env = gitEnvironment({ PATH: '/bin' }, { ...repo, token: 'tok' });
  assert.deepEqual(env, {
    PATH: '/bin',
    GIT_TERMINAL_PROMPT: '0',
    GIT_CONFIG_COUNT: '1',
    GIT_CONFIG_KEY_0: 'http.extraHeader',
    GIT_CONFIG_VALUE_0: `Authorization: Basic ${Buffer.from('x-access-token:tok').toString('base64')}`,
  });
  assert.equal(gitEnvironment({}, repo).GIT_CONFIG_COUNT, undefined);
  assert.equal(mayCarryToken('http://forge.example/a.git'), false);
  assert.equal(mayCarryToken('http://127.0.0.1:3000/a.git'), true);
  assert.equal(mayCarryToken('/srv/git/a'), false);
  assert.equal(fetchUrl('repo', '/home/u'), '/home/u/repo');
  assert.equal(fetchUrl('git@host:a/b.git', '/x'), 'git@host:a/b.git');
  assert.equal(fetchUrl('file:///srv/a', '/x'), 'file:///srv/a');
  assert.equal(redactUrl('https://u:p@forge/a.git'), 'https://***@forge/a.git');
});

test('the command line becomes runner options; a bad value is named', async () => {
  const env = { CONDUCTOR_RUNNER_TOKEN: 'cw_env' };
  assert.deepEqual(
    await parseRunnerArgs(
      [
        '--url',
        'http://cp:8080',
        '--labels',
        'linux, big',
        '--concurrency',
        '3',
        '--poll-max-s',
        '2',
        '--claim-wait-s',
        '5',
      ],
      env,
    ),
    {
      url: 'http://cp:8080',
      token: 'cw_env',
      labels: ['linux', 'big'],
      concurrency: 3,
      executor: 'shell',
      pollMaxMs: 2000,
      claimWaitS: 5,
      channelPollMs: 300_000,
      graceMs: 30_000,
      killGraceMs: 5000,
      httpTimeoutMs: 30_000,
    },
  );
  const parse = (...argv: string[]) => parseRunnerArgs(['--url', 'http://cp', ...argv], env);
  await assert.rejects(parse('--executor', 'vm'), /--executor must be shell or docker/);
  await assert.rejects(parse('--concurrency', '0'), /--concurrency must be at least 1/);
  await assert.rejects(parse('--claim-wait-s', '26'), /--claim-wait-s must be at most 25/);
  assert.equal((await parse()).claimWaitS, 25, 'a long poll of 25 s by default');
  assert.equal((await parse('--channel-poll-s', '0')).channelPollMs, 0, 'the push channel off');
  await assert.rejects(parseRunnerArgs([], env), /--url .* is required/);
  await assert.rejects(parseRunnerArgs(['--bogus'], env), /Unknown option '--bogus'/);
});

test('the token comes from --token-file or $CONDUCTOR_RUNNER_TOKEN, never from the command line, and no error quotes it', async () => {
  const dir = await tempDir('conductor-runner-unit-');
  const file = join(dir, 'token');
  writeFileSync(file, '  cw_from_file\n', { mode: 0o600 });
  const url = ['--url', 'http://cp'];
  const fromFile = await parseRunnerArgs([...url, '--token-file', file], {});
  assert.equal(fromFile.token, 'cw_from_file');
  assert.equal(fromFile.tokenFile, file);

  const refused = async (argv: string[], env: NodeJS.ProcessEnv, message: RegExp) => {
    const err = await parseRunnerArgs([...url, ...argv], env).then(
      () => assert.fail(`${argv.join(' ')} was accepted`),
      (e: Error) => e,
    );
    assert.match(err.message, message);
    assert.doesNotMatch(
      err.message,
      /cw_secret|cw_from_file/,
      'the error does not quote the token',
    );
  };
  await refused(
    ['--token', 'cw_secret'],
    {},
    /^--token is not accepted: a command line is readable by every process on this host; put the token in a file for --token-file, or in \$CONDUCTOR_RUNNER_TOKEN$/,
  );
  await refused([], {}, /^--token-file \(or \$CONDUCTOR_RUNNER_TOKEN\) is required$/);
  await refused(['--token-file', file], { CONDUCTOR_RUNNER_TOKEN: 'cw_secret' }, /not both/);
  await refused(['--token-file', join(dir, 'missing')], {}, /missing cannot be read \(ENOENT\)$/);
  await refused(['--token-file', 'cw_secret'], {}, /takes the path of a file that holds the token/);
  writeFileSync(file, '\n');
  await refused(['--token-file', file], {}, /^--token-file .+ is empty$/);
  writeFileSync(file, 'cw_from_file\nsecond line\n');
  await refused(['--token-file', file], {}, /must hold the token alone, on one line$/);
});

test("--untrusted refuses scripts under the runner's own uid; --run-as and --same-user are for the shell executor, and exclusive; --once runs one task", async () => {
  const env = { CONDUCTOR_RUNNER_TOKEN: 'cw_env' };
  const parse = (...argv: string[]) => parseRunnerArgs(['--url', 'http://cp', ...argv], env);
  const ownUid =
    /^--untrusted refuses the shell executor with scripts under the runner's own uid: they can read its worker token \(use --executor docker, --run-as USER, or start the runner as root without --same-user, so that scripts run as conductor-build\)$/;
  // Whichever user this test runs as.
  assert.match(optionConflict({ untrusted: true }, false) ?? '', ownUid);
  assert.equal(optionConflict({ untrusted: true }, true), undefined, "root's default user");
  assert.match(optionConflict({ untrusted: true, sameUser: true }, true) ?? '', ownUid);
  await assert.rejects(parse('--untrusted', '--same-user'), (err: Error) =>
    ownUid.test(err.message),
  );
  const same = await parse('--same-user');
  assert.equal(same.sameUser, true);
  await assert.rejects(parse('--same-user', '--run-as', 'build'), /contradict each other/);
  await assert.rejects(
    parse('--same-user', '--executor', 'docker'),
    /--same-user is for the shell executor/,
  );
  const once = await parse('--once');
  assert.equal(once.once, true);
  await assert.rejects(parse('--once', '--concurrency', '2'), /--once runs one task/);
  const docker = await parse('--untrusted', '--executor', 'docker');
  assert.equal(docker.untrusted, true);
  const runAs = await parse('--untrusted', '--run-as', 'build');
  assert.deepEqual([runAs.untrusted, runAs.runAs], [true, 'build']);
  await assert.rejects(
    parse('--run-as', 'build', '--executor', 'docker'),
    /--run-as is for the shell executor/,
  );
  // The same rule for whoever starts a runner from code.
  await assert.rejects(
    startRunner({ url: 'http://127.0.0.1:1', token: 't', untrusted: true, sameUser: true }),
    /--untrusted refuses the shell executor with scripts under the runner's own uid/,
  );
});

test("the runner's log: text on a terminal and JSON elsewhere unless --log-format says; a text line a person reads (#48)", async () => {
  assert.equal(chooseLogFormat(undefined, true), 'text');
  assert.equal(chooseLogFormat(undefined, false), 'json');
  assert.equal(chooseLogFormat('json', true), 'json');
  assert.equal(chooseLogFormat('text', false), 'text');
  const env = { CONDUCTOR_RUNNER_TOKEN: 'cw_env' };
  const parse = (...argv: string[]) => parseRunnerArgs(['--url', 'http://cp', ...argv], env);
  assert.equal((await parse('--log-format', 'json')).logFormat, 'json');
  assert.equal((await parse('--log-format', 'text')).logFormat, 'text');
  assert.equal((await parse()).logFormat, undefined);
  await assert.rejects(parse('--log-format', 'yaml'), /--log-format must be text or json/);

  const at = new Date('2026-12-06T09:30:05.123Z');
  assert.equal(
    textLine(
      'info',
      'runner started',
      {
        version: '1.0.0',
        labels: ['linux', 'big'],
        run_as: null,
        untrusted: false,
        concurrency: 2,
      },
      at,
    ),
    '09:30:05 info  runner started (version=1.0.0 labels=linux,big concurrency=2)',
  );
  assert.equal(
    textLine(
      'warn',
      'claim failed; retrying with backoff',
      { err: new Error('connect ECONNREFUSED 127.0.0.1:1'), note: 'two words' },
      at,
    ),
    '09:30:05 warn  claim failed; retrying with backoff: connect ECONNREFUSED 127.0.0.1:1 (note="two words")',
  );
  assert.equal(textLine('error', 'runner stopped', {}, at), '09:30:05 error runner stopped');
});
