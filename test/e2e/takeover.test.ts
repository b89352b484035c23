// A runner that went silent loses its task to the next runner that polls, as
// soon as its lease has expired, with no sweep running (the test stack runs
// none); when it comes back, every call it makes for that task answers 409.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { githubPush } from '../forge/fixtures/github.ts';
import { assertError } from './assertions.ts';
import {
  claim,
  claimTask,
  complete,
  createWorker,
  deliverRunning,
  heartbeat,
  startE2E,
  uploadLog,
} from './calls.ts';
import { pipeline, sha } from './payloads.ts';

const REPO = 'acme/takeover';
const LABEL = 'takeover';
const {
  fake,
  stack,
  projects: { project },
} = await startE2E(import.meta.filename, {
  env: { CONDUCTOR_LEASE_S: '1' },
  projects: { project: { forge: 'github', id: 'takeover', repo: REPO } },
});

test('a silent runner is taken over once its lease runs out, with no sweep, and its late calls answer 409', async () => {
  const commit = sha('takeover');
  fake.setFile(REPO, commit, pipeline(LABEL, '  build:\n    script: [make]\n'));
  const { hook } = await deliverRunning(
    stack,
    'github',
    'push',
    githubPush(REPO, commit),
    project.secret,
  );
  const lost = await createWorker(stack, [LABEL], 'lost');
  const next = await createWorker(stack, [LABEL], 'next');

  const first = await claimTask(stack, lost.token);
  assert.equal(first.attempt, 1);
  // The second runner polls as runners do until the lease has run out.
  let second: Record<string, unknown> | undefined;
  for (let i = 0; i < 200 && !second; i++) {
    const res = await claim(stack, next.token);
    if (res.status === 200) second = res.body.task;
    else {
      assert.equal(res.status, 204, res.text);
      await sleep(50);
    }
  }
  assert.ok(second, 'the task was taken over');
  assert.equal(second.id, first.id);
  assert.equal(second.attempt, 2);
  assert.notEqual(second.lease_id, first.lease_id);

  assertError(await heartbeat(stack, lost.token, first.id, first.lease_id), 409, 'conflict');
  assertError(
    await uploadLog(stack, lost.token, first.id, {
      lease_id: first.lease_id,
      offset: 0,
      data: 'late\n',
    }),
    409,
    'conflict',
  );
  assertError(
    await complete(stack, lost.token, first.id, { lease_id: first.lease_id, outcome: 'success' }),
    409,
    'conflict',
  );

  const done = await complete(stack, next.token, first.id, {
    lease_id: second.lease_id,
    outcome: 'success',
    exit_code: 0,
  });
  assert.equal(done.status, 200, done.text);
  assert.deepEqual(done.body, { state: 'success', job_state: 'success' });
  const view = await stack.call('GET', `/v1/jobs/${hook.body.job_id}`, { token: stack.adminToken });
  const [task] = view.body.tasks;
  assert.equal(task.attempt, 2);
});
