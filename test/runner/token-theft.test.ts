// A script on a shell-executor runner tries to steal the runner's worker token
// (issue #13: `tr '\0' '\n' </proc/$PPID/environ` printed it): the environment,
// command line and memory of every ancestor (the runner, npm and its shell),
// the token file, the files under the runner's workdir and home. Started as a
// user starts it, with `npm run runner`, so that those ancestors exist. Other
// runners may run on the machine at the same time (other test files, other
// checkouts): what the probe finds counts only when it is this test's token.
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { BUILD_USER as DEFAULT_USER } from '../../runner/runas.ts';
import { testStack } from '../helpers/stack.ts';
import { type ChildRunner, childRunner, Fixture, tempDir, waitFor } from './support.ts';

const stack = await testStack(import.meta.filename);
const PROBE = readFileSync(join(import.meta.dirname, 'probe.sh'), 'utf8');
const IS_ROOT = process.getuid?.() === 0;
const BUILD_USER = 'conductor-test-build';
// The runner's home, which its user's files (npm's cache, ...) are under.
const HOME = process.env.HOME || '/root';

/** The unprivileged user scripts run as, made when missing (tests run as root here and in CI). */
function buildUser(): { uid: number; gid: number } {
  const id = (flag: string) => spawnSync('id', [flag, BUILD_USER], { encoding: 'utf8' });
  if (id('-u').status !== 0) {
    const made = spawnSync('useradd', [
      '--system',
      '--no-create-home',
      '--home-dir',
      '/nonexistent',
      '--shell',
      '/usr/sbin/nologin',
      BUILD_USER,
    ]);
    // Another test process may have made it in the meantime.
    assert.ok(made.status === 0 || id('-u').status === 0, made.stderr?.toString());
  }
  return { uid: Number(id('-u').stdout), gid: Number(id('-g').stdout) };
}

/** Whom the scripts run as: --run-as BUILD_USER, a root runner's default user, or --same-user. */
type Who = 'run-as' | 'default' | 'same-user';

interface Theft {
  /** The token under test. */
  token: string;
  report: string[];
  loot: string;
  log: string;
  outputs: Record<string, string> | null;
  stderr: string;
  /** npm's /proc/<pid>/environ, read by the test (root) while the runner ran. */
  npmEnviron: string;
  runner: ChildRunner;
  workdir: string;
}

/**
 * Registers a worker, starts `npm run runner` for it with `args`, the token in
 * a file (0600, in a directory anyone may enter) or in the environment, runs
 * the probe as the job's one task, and answers what the probe found.
 */
async function steal(
  label: string,
  opts: { who: Who; token: 'file' | 'env'; before?: (f: Fixture) => void },
): Promise<Theft & { f: Fixture; tokenFile: string | undefined }> {
  const out = await tempDir('conductor-theft-out-');
  const workdir = await tempDir('conductor-theft-work-');
  const tokenDir = await tempDir('conductor-theft-token-');
  // Only the file's own mode keeps it from the script.
  chmodSync(tokenDir, 0o755);
  // As the runner's default workdir is made (0755): its user may look inside.
  chmodSync(workdir, 0o755);
  if (opts.who === 'run-as') {
    const { uid, gid } = buildUser();
    chownSync(out, uid, gid);
  }
  // The default user may not exist before the runner makes it.
  if (opts.who === 'default') chmodSync(out, 0o777);
  const tokenFile = opts.token === 'file' ? join(tokenDir, 'token') : undefined;
  // Files are searched as the unprivileged user only: as root the search would
  // read all of root's home, and prove only what root can read.
  const dirs = opts.who === 'same-user' ? [] : [workdir, tokenDir, HOME];
  const f = await Fixture.create(
    stack,
    label,
    `  steal:
    outputs: [found]
    script:
      - bash probe.sh ${[out, String(process.pid), tokenFile ?? '', ...dirs].map((a) => `"${a}"`).join(' ')}
      - id
      - env | sort
      - if touch "$(dirname "$CONDUCTOR_OUTPUT")/swapped" 2>/dev/null; then echo "runner files writable"; else echo "runner files closed"; fi
`,
    { 'probe.sh': PROBE },
  );
  opts.before?.(f);
  if (tokenFile) await writeFile(tokenFile, `${f.token}\n`, { mode: 0o600 });
  const args = ['--url', stack.url, '--workdir', workdir, '--poll-max-s', '0.3'];
  if (tokenFile) args.push('--token-file', tokenFile);
  if (opts.who === 'run-as') args.push('--run-as', BUILD_USER);
  if (opts.who === 'same-user' && IS_ROOT) args.push('--same-user');
  const env = { ...process.env };
  if (opts.token === 'env') env.CONDUCTOR_RUNNER_TOKEN = f.token;
  const runner = childRunner(args, env, { npm: true });

  const jobId = await f.trigger();
  const view = await f.finished(jobId, 120_000);
  const task = view.tasks[0]!;
  assert.equal(view.job.state, 'success', `${task.error}\n${await f.log(task.id)}`);
  const log = await f.log(task.id);
  const npmEnviron = readFileSync(`/proc/${runner.child.pid}/environ`, 'latin1');
  // The runner reports the outcome first and removes the task's directory
  // after (as the user, with `rm` under --run-as); "task finished" is logged
  // once that is done. A signal to the group sent before it stopped that
  // `rm` mid-way, and the directory was left behind (a flake seen in CI).
  await waitFor('the runner to finish the task', () =>
    runner.stderr().includes('"message":"task finished"') ? true : undefined,
  );
  // As Ctrl-C in a terminal does: to the whole group (npm would pass it to its shell alone).
  process.kill(-runner.child.pid!, 'SIGTERM');
  await waitFor('the runner to stop', () =>
    runner.stderr().includes('"message":"runner stopped"') ? true : undefined,
  );
  return {
    f,
    token: f.token,
    tokenFile,
    report: readFileSync(join(out, 'report'), 'utf8').trimEnd().split('\n'),
    loot: readFileSync(join(out, 'loot'), 'utf8'),
    log,
    outputs: task.outputs,
    stderr: runner.stderr(),
    npmEnviron,
    runner,
    workdir,
  };
}

/** The ancestors the probe walked, nearest first: pid and command line. */
function ancestors(report: string[]): { pid: string; cmdline: string }[] {
  return report.flatMap((l) => {
    const m = /^ancestor (\d+) (.*)$/.exec(l);
    return m ? [{ pid: m[1]!, cmdline: m[2]! }] : [];
  });
}

/**
 * What the probe said of one attempt: found (this test's token), none or
 * denied. Tokens of other runners on the machine count as none: the probe
 * reads whatever its user may, and other test files run runners of their own.
 */
function said(theft: Theft, what: string): string | undefined {
  const rest = theft.report.find((l) => l.startsWith(`${what} `))?.slice(what.length + 1);
  if (!rest?.startsWith('found')) return rest;
  return rest.split(' ').includes(theft.token) ? 'found' : 'none';
}

/** The runner's node process and npm's, among the ancestors the probe walked. */
function runnerAndNpm(theft: Theft) {
  const walked = ancestors(theft.report);
  // The nearest: npm's shell, when there is one, names it too.
  const runner = walked.find((a) => a.cmdline.includes('scripts/runner.ts'));
  const npm = walked.find((a) => a.pid === String(theft.runner.child.pid));
  assert.ok(runner, `the probe walked past the runner:\n${theft.report.join('\n')}`);
  assert.ok(
    npm,
    `the probe walked up to npm (${theft.runner.child.pid}):\n${theft.report.join('\n')}`,
  );
  // Up to the test's own process: nothing between it and the script was left out.
  assert.equal(said(theft, 'stopped at'), String(process.pid));
  return { runner, npm, walked };
}

/** Every process between the script's shell and the test is root's: its environment and memory are closed. */
function assertClosed(theft: Theft, walked: { pid: string }[]): void {
  for (const { pid } of walked.slice(1)) {
    assert.equal(said(theft, `environ ${pid}`), 'denied', `environ of ${pid}`);
    assert.equal(said(theft, `mem ${pid}`), 'denied', `mem of ${pid}`);
    // A command line is anyone's to read: none holds the token.
    assert.equal(said(theft, `cmdline ${pid}`), 'none', `cmdline of ${pid}`);
  }
}

/** The token is nowhere the script could put it, nor in what the runner printed. */
function assertKept(theft: Theft): void {
  const { token } = theft;
  assert.ok(
    !theft.loot.includes(token),
    `the script's loot holds the token:\n${theft.report.join('\n')}`,
  );
  assert.deepEqual(
    theft.report.filter((l) => / found /.test(l) && l.split(' ').includes(token)),
    [],
  );
  assert.ok(!theft.log.includes(token), 'the task log does not hold the token');
  // What it sent out holds no token of this runner's, not even masked.
  assert.deepEqual(Object.keys(theft.outputs ?? {}), ['found']);
  assert.doesNotMatch(theft.outputs!.found!, /\*\*\*/);
  assert.ok(!theft.stderr.includes(token), "the runner's own lines do not hold the token");
}

/** Adds a commit with a symbolic link `path` -> `target` to the fixture's repository, and builds that. */
function commitLink(f: Fixture, path: string, target: string): void {
  const git = (...args: string[]) =>
    execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', ...args], {
      cwd: f.repo.dir,
    })
      .toString()
      .trim();
  execFileSync('ln', ['-s', target, join(f.repo.dir, path)]);
  git('add', path);
  git('commit', '-q', '-m', 'a link');
  f.repo.sha = git('rev-parse', 'HEAD');
}

if (IS_ROOT) {
  test('with --run-as, a script can read nothing of the token: not the environment, command line or memory of the runner and npm, not the token file, not a file under the workdir or the home', async () => {
    // A link in the checkout to a directory of root's: giving the workspace
    // to the user must not give that directory too.
    const outside = await tempDir('conductor-theft-outside-');
    mkdirSync(join(outside, 'inner'));
    const theft = await steal('theft-runas', {
      who: 'run-as',
      token: 'file',
      before: (f) => commitLink(f, 'etc-link', outside),
    });
    assertKept(theft);
    const { runner, npm, walked } = runnerAndNpm(theft);
    assertClosed(theft, walked);
    assert.ok(runner.cmdline.includes(`--token-file ${theft.tokenFile}`), runner.cmdline);
    assert.ok(npm.cmdline.includes('run'), npm.cmdline);
    assert.equal(said(theft, `token-file ${theft.tokenFile}`), 'denied');
    assert.equal(said(theft, `files ${theft.workdir}`), 'none');
    // Root's home is usually 0700 (denied); a CI's may be open, and then holds no token either.
    assert.match(said(theft, `files ${HOME}`) ?? '', /^(denied|none)$/);
    // The script ran as the user, with no group of root's, its environment built from scratch.
    assert.match(
      theft.log,
      /^uid=\d+\(conductor-test-build\) gid=\d+\(conductor-test-build\) groups=\d+\(conductor-test-build\)$/m,
    );
    assert.match(theft.log, /^USER=conductor-test-build$/m);
    assert.match(theft.log, /^HOME=\/nonexistent$/m);
    // The runner's own directory, where it reads the outputs from, is not the
    // user's to add a link to.
    assert.match(theft.log, /^runner files closed$/m);
    assert.deepEqual(
      [statSync(outside).uid, statSync(join(outside, 'inner')).uid],
      [0, 0],
      "the directory the link points at is still root's",
    );
    // The task's directory is gone: emptied as the user, then removed by the runner.
    assert.deepEqual(readdirSync(theft.workdir), []);
  });

  test('with --run-as and the token in $CONDUCTOR_RUNNER_TOKEN, npm holds it in its environment, and a script cannot read it there', async () => {
    const theft = await steal('theft-runas-env', { who: 'run-as', token: 'env' });
    assertKept(theft);
    const { walked } = runnerAndNpm(theft);
    assertClosed(theft, walked);
    // The same probe as root, the same uid as npm, finds it there (the next
    // test): what closes it here is the uid alone.
    assert.ok(theft.npmEnviron.includes(`CONDUCTOR_RUNNER_TOKEN=${theft.f.token}`));
  });

  test(`with no --run-as and no --same-user, a root runner's scripts run as ${DEFAULT_USER} and can read nothing of the token`, async () => {
    const theft = await steal('theft-default', { who: 'default', token: 'file' });
    assertKept(theft);
    const { walked } = runnerAndNpm(theft);
    assertClosed(theft, walked);
    assert.equal(said(theft, `token-file ${theft.tokenFile}`), 'denied');
    assert.equal(said(theft, `files ${theft.workdir}`), 'none');
    assert.match(
      theft.log,
      new RegExp(
        `^uid=\\d+\\(${DEFAULT_USER}\\) gid=\\d+\\(${DEFAULT_USER}\\) groups=\\d+\\(${DEFAULT_USER}\\)$`,
        'm',
      ),
    );
    assert.match(theft.log, new RegExp(`^USER=${DEFAULT_USER}$`, 'm'));
    assert.match(theft.log, /^runner files closed$/m);
    assert.match(theft.stderr, new RegExp(`"run_as":"${DEFAULT_USER}"`));
    assert.doesNotMatch(theft.stderr, /can read its worker token/);
  });
} else {
  test('--run-as refuses to start when the runner is not root', async () => {
    // The only way to run scripts under another uid; without it the shell
    // executor keeps the token from no script (the next test).
    const f = await Fixture.create(stack, 'theft-norun', '  none:\n    script: [true]\n');
    const runner = childRunner(
      [
        '--url',
        stack.url,
        '--token-file',
        await f.tokenFile(),
        '--run-as',
        'nobody',
        '--untrusted',
      ],
      process.env,
      { npm: true },
    );
    await runner.exited;
    assert.match(
      runner.stderr(),
      /conductor-runner: --run-as needs the runner to run as root, which alone may start a process as another user/,
    );
  });
}

test("with scripts under the runner's own uid, its environment and command line no longer give the token away, but npm's environment and the runner's memory do: why it takes --same-user as root, and why --untrusted refuses it", async () => {
  const theft = await steal('theft-same-uid', { who: 'same-user', token: 'env' });
  const token = theft.token;
  const { runner, npm } = runnerAndNpm(theft);
  // What issue #13 found: `tr '\0' '\n' </proc/$PPID/environ` (the runner
  // itself) printed CONDUCTOR_RUNNER_TOKEN. It is blanked there now.
  assert.equal(said(theft, `environ ${runner.pid}`), 'none');
  assert.equal(said(theft, `cmdline ${runner.pid}`), 'none');
  assert.match(said(theft, 'own-environ') ?? '', /none$/);
  // npm's environment is fixed since npm started, and the same uid reads it.
  assert.equal(said(theft, `environ ${npm.pid}`), 'found');
  // The token lives in the runner's heap. Reading another process's memory
  // takes the same uid, or CAP_SYS_PTRACE where Yama's ptrace_scope limits it to descendants.
  const scope = (() => {
    try {
      return Number(readFileSync('/proc/sys/kernel/yama/ptrace_scope', 'utf8'));
    } catch {
      return 0;
    }
  })();
  assert.equal(said(theft, `mem ${runner.pid}`), IS_ROOT || scope === 0 ? 'found' : 'denied');
  // Found, the token is the script's to send anywhere (here to a file of
  // its own); masking hides it only from whoever reads the log or the
  // outputs, which the runner masks alike.
  assert.ok(theft.loot.includes(token));
  assert.ok(theft.outputs?.found?.split(' ').includes('***'), JSON.stringify(theft.outputs));
  assert.ok(!theft.log.includes(token), 'the runner masks its own token in the log');
  assert.match(theft.log, /\*\*\*/);
  assert.ok(!theft.stderr.includes(token), "the runner's own lines do not hold the token");
  assert.match(
    theft.stderr,
    IS_ROOT
      ? /"message":"--same-user: scripts run as the runner's own user \(root\): they can read its worker token and all else on this host/
      : /"message":"scripts run as the runner's own user \([^)]*\): they can read its worker token; start the runner as root, so that they run as conductor-build, or give --run-as USER/,
  );
});

test("a runner started with --untrusted refuses the shell executor with scripts under the runner's own uid", async () => {
  // As root that takes --same-user; otherwise it is the default.
  const runner = childRunner(
    ['--url', stack.url, '--untrusted', ...(IS_ROOT ? ['--same-user'] : [])],
    { ...process.env, CONDUCTOR_RUNNER_TOKEN: 'cw_unused' },
  );
  const exit = await runner.exited;
  assert.equal(exit.code, 2, runner.stderr());
  assert.match(
    runner.stderr(),
    /^--untrusted refuses the shell executor with scripts under the runner's own uid: they can read its worker token \(use --executor docker, --run-as USER, or start the runner as root without --same-user, so that scripts run as conductor-build\)$/m,
  );
});
