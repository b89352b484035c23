// Under the docker executor, a container's root writes through the
// read-write bind mount of /conductor, where the runner reads the outputs
// file and the line file once the script is over (issue #28, item 3). It
// replaces them with a link to a host file, which the runner read as itself
// (an env-style file came back whole as outputs, any other quoted in the
// error), or with a FIFO, on which the runner's read waited forever while its
// heartbeats kept the lease alive. There is no Docker engine here: a fake
// `docker` runs the script on the host with the mount's host path in its place.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { testStack } from '../helpers/stack.ts';
import { Fixture, fakeDocker, tempDir } from './support.ts';

const stack = await testStack(import.meta.filename);

test('a container that swaps the files the runner reads for links to host files or FIFOs fails its task with an error naming the file, leaks nothing of the host files, and the runner goes on', async () => {
  const secret = `host-secret-${randomBytes(8).toString('hex')}`;
  const host = await tempDir('conductor-host-files-');
  const envFile = join(host, 'app.env');
  const textFile = join(host, 'notes.txt');
  await writeFile(envFile, `LEAK=${secret}\n`);
  await writeFile(textFile, `${secret} is the first line\n`);
  const line = '"$(dirname "$CONDUCTOR_OUTPUT")/line"';
  const f = await Fixture.create(
    stack,
    'hostile-files',
    `  link-env:
    allow_failure: true
    outputs: [LEAK]
    script: ['ln -sfn ${envFile} "$CONDUCTOR_OUTPUT"']
  link-text:
    allow_failure: true
    script: ['ln -sfn ${textFile} "$CONDUCTOR_OUTPUT"']
  fifo:
    allow_failure: true
    script: ['rm -f "$CONDUCTOR_OUTPUT"', 'mkfifo "$CONDUCTOR_OUTPUT"']
  fifo-line:
    allow_failure: true
    script:
      # In place of the wrapper's own trap, which records the line there.
      - trap 'rm -f ${line}; mkfifo ${line}' EXIT
      - exit 3
  after:
    # Not link-env: a task that needs it fails for its missing output.
    needs: [link-text, fifo, fifo-line]
    script: ['echo the runner went on']
`,
  );
  // One task at a time: a read that waits forever holds up every task after it.
  await f.runner({ ...(await fakeDocker()), concurrency: 1 });
  const jobId = await f.trigger();
  // Far below the tasks' 1-hour timeout: a runner wedged on a FIFO never gets here.
  const view = await f.finished(jobId, 60_000);
  const byName = Object.fromEntries(view.tasks.map((t) => [t.name, t]));
  const notRegular = (file: string, kind: string) =>
    `${file} is ${kind}, not a regular file: the runner reads only a regular file there`;
  const expected = {
    'link-env': notRegular('$CONDUCTOR_OUTPUT', 'a symbolic link'),
    'link-text': notRegular('$CONDUCTOR_OUTPUT', 'a symbolic link'),
    fifo: notRegular('$CONDUCTOR_OUTPUT', 'a named pipe (FIFO)'),
    'fifo-line': `the script exited with 3; ${notRegular("the script's line file (beside $CONDUCTOR_OUTPUT)", 'a named pipe (FIFO)')}`,
  };
  for (const [name, error] of Object.entries(expected)) {
    const task = byName[name]!;
    assert.deepEqual(
      { state: task.state, attempt: task.attempt, error: task.error },
      { state: 'failed', attempt: 1, error },
      name,
    );
  }
  assert.equal(byName['link-env']!.exit_code, 0);
  assert.equal(byName['fifo-line']!.exit_code, 3);
  const after = byName.after!;
  assert.equal(after.state, 'success', after.error ?? '');
  assert.match(await f.log(after.id), /^the runner went on$/m);

  // Nothing of the host files reached the control plane: not as outputs, not
  // in an error, not in a log.
  assert.ok(!JSON.stringify(view).includes(secret), JSON.stringify(view));
  for (const task of view.tasks) {
    const log = await f.log(task.id);
    assert.ok(!log.includes(secret), `${task.name}'s log: ${log}`);
  }
});
