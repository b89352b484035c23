// The runner installed without the repository: `npm run build-runner`'s one
// file, copied alone into an empty directory with no node_modules above it,
// run with plain Node against the local stack. Its version, a task to
// success, and what it says when its token is refused.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { copyFile, readdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { after, test } from 'node:test';
import { buildRunner, type RunnerBuild } from '../../scripts/build-runner.ts';
import { testStack } from '../helpers/stack.ts';
import { Fixture, killGroup, tempDir } from './support.ts';

const stack = await testStack(import.meta.filename);
const ROOT = join(import.meta.dirname, '..', '..');

// Built at the top, not in a before() hook: the temp dirs are removed when
// the file ends, not when a hook does.
const buildStarted = Date.now();
const built: RunnerBuild = await buildRunner({
  outfile: join(await tempDir('conductor-build-runner-'), 'out.mjs'),
});
const buildMs = Date.now() - buildStarted;
/** The directory holding the bundle and nothing else. */
const alone = await tempDir('conductor-runner-alone-');
await copyFile(built.outfile, join(alone, 'conductor-runner.mjs'));

test('the bundle is built in seconds and copied alone where no package can be resolved from', async () => {
  // The build is part of these tests: it has to stay quick.
  assert.ok(buildMs < 15_000, `the build took ${buildMs} ms`);
  assert.deepEqual(await readdir(alone), ['conductor-runner.mjs']);
  for (let dir = alone; ; dir = dirname(dir)) {
    assert.ok(!existsSync(join(dir, 'node_modules')), `${dir} has a node_modules`);
    assert.ok(!existsSync(join(dir, 'package.json')), `${dir} has a package.json`);
    if (dirname(dir) === dir) break;
  }
  assert.ok(!alone.startsWith(ROOT));
});

/** The environment of a host that has Node and nothing of this repository's. */
function bareEnv(): NodeJS.ProcessEnv {
  const { NODE_OPTIONS: _o, NODE_PATH: _p, ...env } = process.env;
  return env;
}

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** `node conductor-runner.mjs ARGS` in the bundle's directory, to its end. */
function runBundle(args: string[], timeoutMs = 60_000): Promise<Ran> {
  const child = spawn(process.execPath, ['conductor-runner.mjs', ...args], {
    cwd: alone,
    env: bareEnv(),
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => {
    stdout += d.toString();
  });
  child.stderr.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  const timer = setTimeout(() => child.pid && killGroup(child.pid), timeoutMs);
  after(() => child.pid && killGroup(child.pid));
  return new Promise((done) =>
    child.once('close', (code) => {
      clearTimeout(timer);
      done({ code, stdout, stderr });
    }),
  );
}

test('--version prints package.json version and the commit the bundle was built from', async () => {
  const pkg = JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as { version: string };
  const head = execFileSync('git', ['rev-parse', '--short=12', 'HEAD'], { cwd: ROOT })
    .toString()
    .trim();
  const ran = await runBundle(['--version']);
  assert.equal(ran.code, 0, ran.stderr);
  assert.equal(ran.stdout, `conductor-runner ${built.version}\n`);
  assert.match(
    built.version,
    new RegExp(
      `^${pkg.version.replaceAll('.', '\\.')} \\(git ${head}(, with uncommitted changes)?\\)$`,
    ),
  );
  assert.equal(ran.stderr, '');
});

test('the bundle alone runs a task to success: it checks out the commit, runs the script, streams the log and reports', async () => {
  const f = await Fixture.create(
    stack,
    'bundle',
    `  hello:
    outputs: [greeting]
    script:
      - cat greeting.txt
      - echo "greeting=$(cat greeting.txt)" >> "$CONDUCTOR_OUTPUT"
`,
    { 'greeting.txt': 'hello from the bundle\n' },
  );
  const jobId = await f.trigger();
  const ran = await runBundle([
    '--url',
    stack.url,
    '--token-file',
    await f.tokenFile(),
    '--once',
    // The script writes nothing outside its workspace: the runner's user is fine.
    '--same-user',
    '--poll-max-s',
    '0.3',
    '--workdir',
    await tempDir('conductor-runner-alone-work-'),
  ]);
  assert.equal(ran.code, 0, ran.stderr);
  const started = ran.stderr.split('\n').find((l) => l.includes('"message":"runner started"'));
  assert.ok(started, ran.stderr);
  assert.equal(JSON.parse(started).version, built.version);
  const view = await f.finished(jobId);
  assert.equal(view.job.state, 'success', JSON.stringify(view));
  const task = view.tasks[0]!;
  assert.deepEqual(task.outputs, { greeting: 'hello from the bundle' });
  assert.match(await f.log(task.id), /^\+ cat greeting\.txt\nhello from the bundle$/m);
});

test('a revoked token, or a token that is not a worker token, stops the runner with what to check', async () => {
  const f = await Fixture.create(stack, 'revoked', "  a:\n    script: ['true']\n");
  const workers = await stack.call('GET', '/v1/workers', { token: stack.adminToken });
  assert.equal(workers.status, 200, workers.text);
  const worker = workers.body.workers.find((w: { name: string }) => w.name === 'revoked-worker');
  assert.ok(worker, workers.text);
  const revoked = await stack.call('DELETE', `/v1/workers/${worker.id}`, {
    token: stack.adminToken,
  });
  assert.ok(revoked.status < 300, revoked.text);
  const dir = await tempDir('conductor-runner-alone-token-');
  for (const [name, token] of [
    ['revoked', f.token],
    ['admin', stack.adminToken],
  ] as const) {
    const file = join(dir, name);
    await writeFile(file, `${token}\n`, { mode: 0o600 });
    const ran = await runBundle(['--url', stack.url, '--token-file', file, '--same-user']);
    assert.equal(ran.code, 1, `${name}: ${ran.stderr}`);
    const said = ran.stderr.split('\n').find((l) => l.startsWith('conductor-runner: '));
    assert.equal(
      said,
      `conductor-runner: the control plane refused the worker token (POST /v1/runner/claim: HTTP 401: a worker token is required): it was revoked, it is not a worker token (an admin token, or another control plane's), or it is an ephemeral worker's that has made its one claim. Check the token in the file --token-file ${file}, and that its worker is still listed by \`conductor workers\` (GET /v1/workers); if it is not, register one (\`conductor worker create\`) and put the new token there`,
      name,
    );
    assert.ok(!ran.stderr.includes(token), `${name}: the token is never printed`);
  }
});
