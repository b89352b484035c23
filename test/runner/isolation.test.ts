// Isolation by default (issue #28): a root runner's shell scripts run as an
// unprivileged user of their own, which the runner makes when the machine
// has none, as `npm start` makes the postgres user. Scripts under the
// runner's own uid can read its worker token (token-theft.test.ts).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, test } from 'node:test';
import type { Logger } from '../../runner/index.ts';
import { testStack } from '../helpers/stack.ts';
import { Fixture, tempDir } from './support.ts';

const stack = await testStack(import.meta.filename);
const IS_ROOT = process.getuid?.() === 0;

function recorder(): { log: Logger; lines: () => string[] } {
  const lines: string[] = [];
  return {
    log: (level, message) => lines.push(`${level} ${message}`),
    lines: () => lines,
  };
}

if (IS_ROOT) {
  test('a root runner with neither --run-as nor --same-user makes its build user when the machine has none, says so once, and runs scripts as it', async () => {
    // A name of this test's own, so that it is surely missing, and removed after.
    const user = `cb-test-${randomBytes(3).toString('hex')}`;
    const gone = () => spawnSync('userdel', ['--remove', user], { stdio: 'ignore' });
    after(gone);
    const f = await Fixture.create(
      stack,
      'isolation',
      "  who:\n    script: ['id -un', 'echo \"home=$HOME\"', 'touch \"$CONDUCTOR_WORKSPACE/mine\"']\n",
    );
    // The runner makes the workdir itself, passable by the user.
    const base = await tempDir('conductor-isolation-');
    chmodSync(base, 0o711);
    const workdir = join(base, 'made', 'by-runner');
    const first = recorder();
    const runner = await f.runner({ buildUser: user, workdir, log: first.log });
    const made = `info made the system user ${user}, which runs this runner's scripts (so that they cannot read its worker token)`;
    assert.deepEqual(
      first.lines().filter((l) => l.includes('made the system user')),
      [made],
    );
    assert.ok(
      !first.lines().some((l) => l.includes('can read its worker token')),
      first.lines().join('\n'),
    );
    const jobId = await f.trigger();
    const task = (await f.finished(jobId)).tasks[0]!;
    assert.equal(task.state, 'success', task.error ?? '');
    const log = await f.log(task.id);
    assert.match(log, new RegExp(`^${user}$`, 'm'));
    assert.match(log, new RegExp(`^home=/var/lib/${user}$`, 'm'));
    await runner.stop();

    // A second start finds the user there.
    const second = recorder();
    const again = await f.runner({ buildUser: user, workdir, log: second.log });
    await again.stop();
    assert.deepEqual(
      second.lines().filter((l) => l.includes('made the system user')),
      [],
    );
    assert.ok(second.lines().includes('info runner started'));
  });

  test('a root runner refuses to start when its build user could read the token file', async () => {
    // A token file anyone may read: the check is asked of the user itself.
    const dir = await tempDir('conductor-isolation-token-');
    chmodSync(dir, 0o755);
    const f = await Fixture.create(stack, 'isolation-open', "  none:\n    script: ['true']\n");
    const tokenFile = join(dir, 'token');
    writeFileSync(tokenFile, `${f.token}\n`, { mode: 0o644 });
    const workdir = await tempDir('conductor-isolation-work-');
    chmodSync(workdir, 0o711);
    await assert.rejects(f.runner({ buildUser: 'nobody', tokenFile, workdir }), {
      message: `the build user nobody (a root runner's scripts run as it; --run-as USER or --same-user to change that): that user can read the token file ${tokenFile}; make it readable by the runner's user alone (chmod 600, owned by root)`,
    });
  });
} else {
  test('a runner that is not root runs scripts as its own user, and warns at start that they can read its token', async () => {
    const f = await Fixture.create(stack, 'isolation-user', "  none:\n    script: ['true']\n");
    const rec = recorder();
    const runner = await f.runner({ sameUser: undefined, log: rec.log });
    await runner.stop();
    assert.ok(
      rec
        .lines()
        .some((l) =>
          /^warn scripts run as the runner's own user \(.+\): they can read its worker token; start the runner as root, so that they run as conductor-build, or give --run-as USER/.test(
            l,
          ),
        ),
      rec.lines().join('\n'),
    );
  });
}
