// Giving up: a status still failing after the give-up time (24 h by default)
// is given up with its last error kept; a refusal that retrying cannot fix is
// given up at once; rate limits and timeouts are retried.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runSweep } from '../../lib/sweeper.ts';
import { sha } from '../e2e/support.ts';
import { startFakeStatusForge } from '../helpers/fake-status-forge.ts';
import { testStack } from '../helpers/stack.ts';
import {
  makeDue,
  makeProject,
  outbox,
  pipelineFile,
  push,
  runTasks,
  seen,
  seenAnswered,
  statusesSettled,
} from './support.ts';

const fake = await startFakeStatusForge();
const stack = await testStack(import.meta.filename, { CONDUCTOR_GITHUB_API_URL: fake.url });

const ONE_TASK = '  check:\n    script: [make check]\n';

async function age(jobId: string, hours: number): Promise<void> {
  await stack.context.pool.query(
    `update status_outbox set created_at = now() - make_interval(hours => $2)
      where job_id = $1 and result is null`,
    [jobId, hours],
  );
}

test('a status still failing 24 h after it was written is given up with its last error; a later state is still posted', async () => {
  const p = await makeProject(stack, fake, 'github', 'give-up-age');
  const commit = sha('give-up-age');
  fake.setFile(p.repo, commit, pipelineFile(p.label, ONE_TASK));
  fake.down(500);
  let jobId: string;
  try {
    jobId = await push(stack, p, commit);
    await statusesSettled(stack, fake, jobId, commit, 1);

    // 23 h old: still retried.
    await age(jobId, 23);
    await makeDue(stack, jobId);
    const young = await runSweep(stack.context);
    assert.equal(young.statuses_failed, 1);
    assert.equal(young.statuses_given_up, 0);

    // Past 24 h: the next failure gives it up.
    await age(jobId, 25);
    await makeDue(stack, jobId);
    const old = await runSweep(stack.context);
    assert.equal(old.statuses_given_up, 1);
    assert.equal(old.statuses_failed, 0);
    const row = (await outbox(stack, jobId))[1]!;
    assert.equal(row.description, 'running 1 task');
    assert.equal(row.result, 'gave_up');
    assert.equal(row.attempts, 3);
    assert.equal(
      row.last_error,
      `github answered HTTP 500 for ${fake.url}/repos/${p.repo}/statuses/${commit}`,
    );
  } finally {
    fake.up();
  }
  // Given up is final: the forge being back does not bring it back.
  await makeDue(stack, jobId);
  const after = await runSweep(stack.context);
  assert.equal(after.statuses_delivered, 0);
  assert.equal(fake.statusesFor(commit).length, 3);

  // The job's next state is a new row, posted as usual.
  assert.equal((await runTasks(stack, p)).at(-1), 'success');
  assert.deepEqual(seenAnswered(fake.statusesFor(commit)), [
    'pending: running 1 task -> 500',
    'pending: running 1 task -> 500',
    'pending: running 1 task -> 500',
    'success: 1 passed -> 201',
  ]);
});

test('a refusal (401, 403, 404, 422) is given up at once, with the answer recorded', async () => {
  const p = await makeProject(stack, fake, 'github', 'refused');
  for (const status of [401, 403, 404, 422]) {
    const commit = sha(`refused-${status}`);
    fake.setFile(p.repo, commit, pipelineFile(p.label, ONE_TASK));
    fake.down(status);
    try {
      const jobId = await push(stack, p, commit, `refs/heads/refused-${status}`);
      const posts = await statusesSettled(stack, fake, jobId, commit, 1);
      assert.equal(posts[0]!.answered, status);
      const row = (await outbox(stack, jobId))[1]!;
      assert.equal(row.result, 'gave_up', `HTTP ${status} is given up at once`);
      assert.equal(row.attempts, 1);
      assert.equal(
        row.last_error,
        `github answered HTTP ${status} for ${fake.url}/repos/${p.repo}/statuses/${commit}`,
      );
      await makeDue(stack, jobId);
      assert.equal((await runSweep(stack.context)).statuses_delivered, 0);
      assert.equal(fake.statusesFor(commit).length, 1, 'never tried again');
    } finally {
      fake.up();
    }
  }
});

test('a refusal met by the sweep is counted as given up, not failed', async () => {
  const p = await makeProject(stack, fake, 'gitea', 'refused-later');
  const commit = sha('refused-later');
  fake.setFile(p.repo, commit, pipelineFile(p.label, ONE_TASK));
  fake.down(500);
  try {
    const jobId = await push(stack, p, commit);
    await statusesSettled(stack, fake, jobId, commit, 1);
    fake.down(404);
    await makeDue(stack, jobId);
    const summary = await runSweep(stack.context);
    assert.equal(summary.statuses_given_up, 1);
    assert.equal(summary.statuses_failed, 0);
    const row = (await outbox(stack, jobId))[1]!;
    assert.equal(row.result, 'gave_up');
    assert.equal(
      row.last_error,
      `gitea answered HTTP 404 for ${fake.url}/api/v1/repos/${p.repo}/statuses/${commit}`,
    );
  } finally {
    fake.up();
  }
});

test('rate limits and timeouts (429, 408, 403 with x-ratelimit-remaining: 0) are retried, then posted', async () => {
  const p = await makeProject(stack, fake, 'github', 'rate-limited');
  const commit = sha('rate-limited');
  fake.setFile(p.repo, commit, pipelineFile(p.label, ONE_TASK));
  fake.down(429, { headers: { 'retry-after': '1' } });
  try {
    const jobId = await push(stack, p, commit);
    await statusesSettled(stack, fake, jobId, commit, 1);
    assert.equal((await outbox(stack, jobId))[1]!.result, null, '429 is retried');

    fake.down(408);
    await makeDue(stack, jobId);
    assert.equal((await runSweep(stack.context)).statuses_failed, 1, '408 is retried');

    fake.down(403, { headers: { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '1' } });
    await makeDue(stack, jobId);
    const limited = await runSweep(stack.context);
    assert.equal(limited.statuses_failed, 1, 'a 403 for an exhausted rate limit is retried');
    assert.equal(limited.statuses_given_up, 0);

    fake.up();
    await makeDue(stack, jobId);
    assert.equal((await runSweep(stack.context)).statuses_delivered, 1);
    assert.deepEqual(seenAnswered(fake.statusesFor(commit)), [
      'pending: running 1 task -> 429',
      'pending: running 1 task -> 408',
      'pending: running 1 task -> 403',
      'pending: running 1 task -> 201',
    ]);
  } finally {
    fake.up();
  }
});

test('a status written before the project lost its forge token is given up, and nothing more is recorded', async () => {
  const p = await makeProject(stack, fake, 'github', 'token-removed');
  const commit = sha('token-removed');
  fake.setFile(p.repo, commit, pipelineFile(p.label, ONE_TASK));
  fake.down(500);
  let jobId: string;
  try {
    jobId = await push(stack, p, commit);
    await statusesSettled(stack, fake, jobId, commit, 1);
  } finally {
    fake.up();
  }
  const patched = await stack.call('PATCH', `/v1/projects/${p.id}`, {
    token: stack.adminToken,
    body: { forge_token: null },
  });
  assert.equal(patched.status, 200, patched.text);
  assert.equal(patched.body.project.commit_statuses, 'off: the project has no forge token');

  await makeDue(stack, jobId);
  const summary = await runSweep(stack.context);
  assert.equal(summary.statuses_given_up, 1);
  const rows = await outbox(stack, jobId);
  assert.equal(rows[1]!.result, 'gave_up');
  assert.equal(rows[1]!.last_error, 'the project has no forge token');

  assert.equal((await runTasks(stack, p)).at(-1), 'success');
  assert.equal((await outbox(stack, jobId)).length, 2, 'the end of the job is not recorded');
  assert.deepEqual(seen(fake.acceptedFor(commit)), []);
});
