// Giving up: a status still failing after the give-up time (24 h by default)
// is given up with its last error kept; a refusal that retrying cannot fix is
// given up at once; rate limits and timeouts are retried.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { sha } from '../e2e/payloads.ts';
import {
  adminCall,
  makeProject,
  ONE_TASK,
  outbox,
  pipelineFile,
  projectOn,
  pushSettled,
  runTasks,
  seen,
  seenAnswered,
  statusStack,
  sweepDue,
  whileDown,
} from './support.ts';

const { fake, stack } = await statusStack(import.meta.filename);

async function age(jobId: string, hours: number): Promise<void> {
  await stack.context.pool.query(
    `update status_outbox set created_at = now() - make_interval(hours => $2)
      where job_id = $1 and result is null`,
    [jobId, hours],
  );
}

test('a status still failing 24 h after it was written is given up with its last error; a later state is still posted', async () => {
  const { p, commit } = await projectOn(stack, fake, 'github', 'give-up-age', ONE_TASK);
  const jobId = await whileDown(fake, 500, async () => {
    const { jobId } = await pushSettled(stack, fake, p, commit);

    // 23 h old: still retried.
    await age(jobId, 23);
    const young = await sweepDue(stack, jobId);
    assert.equal(young.statuses_failed, 1);
    assert.equal(young.statuses_given_up, 0);

    // Past 24 h: the next failure gives it up.
    await age(jobId, 25);
    const old = await sweepDue(stack, jobId);
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
    return jobId;
  });
  // Given up is final: the forge being back does not bring it back.
  const after = await sweepDue(stack, jobId);
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
    await whileDown(fake, status, async () => {
      const { jobId, posts } = await pushSettled(
        stack,
        fake,
        p,
        commit,
        `refs/heads/refused-${status}`,
      );
      assert.equal(posts[0]!.answered, status);
      const row = (await outbox(stack, jobId))[1]!;
      assert.equal(row.result, 'gave_up', `HTTP ${status} is given up at once`);
      assert.equal(row.attempts, 1);
      assert.equal(
        row.last_error,
        `github answered HTTP ${status} for ${fake.url}/repos/${p.repo}/statuses/${commit}`,
      );
      assert.equal((await sweepDue(stack, jobId)).statuses_delivered, 0);
      assert.equal(fake.statusesFor(commit).length, 1, 'never tried again');
    });
  }
});

test('a refusal met by the sweep is counted as given up, not failed', async () => {
  const { p, commit } = await projectOn(stack, fake, 'gitea', 'refused-later', ONE_TASK);
  await whileDown(fake, 500, async () => {
    const { jobId } = await pushSettled(stack, fake, p, commit);
    fake.down(404);
    const summary = await sweepDue(stack, jobId);
    assert.equal(summary.statuses_given_up, 1);
    assert.equal(summary.statuses_failed, 0);
    const row = (await outbox(stack, jobId))[1]!;
    assert.equal(row.result, 'gave_up');
    assert.equal(
      row.last_error,
      `gitea answered HTTP 404 for ${fake.url}/api/v1/repos/${p.repo}/statuses/${commit}`,
    );
  });
});

test('rate limits and timeouts (429, 408, 403 with x-ratelimit-remaining: 0) are retried, then posted', async () => {
  const { p, commit } = await projectOn(stack, fake, 'github', 'rate-limited', ONE_TASK);
  await whileDown(
    fake,
    429,
    async () => {
      const { jobId } = await pushSettled(stack, fake, p, commit);
      assert.equal((await outbox(stack, jobId))[1]!.result, null, '429 is retried');

      fake.down(408);
      assert.equal((await sweepDue(stack, jobId)).statuses_failed, 1, '408 is retried');

      fake.down(403, { headers: { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '1' } });
      const limited = await sweepDue(stack, jobId);
      assert.equal(limited.statuses_failed, 1, 'a 403 for an exhausted rate limit is retried');
      assert.equal(limited.statuses_given_up, 0);

      fake.up();
      assert.equal((await sweepDue(stack, jobId)).statuses_delivered, 1);
      assert.deepEqual(seenAnswered(fake.statusesFor(commit)), [
        'pending: running 1 task -> 429',
        'pending: running 1 task -> 408',
        'pending: running 1 task -> 403',
        'pending: running 1 task -> 201',
      ]);
    },
    { headers: { 'retry-after': '1' } },
  );
});

test('a status written before the project lost its forge token is given up, and nothing more is recorded', async () => {
  const { p, commit } = await projectOn(stack, fake, 'github', 'token-removed', ONE_TASK);
  const { jobId } = await whileDown(fake, 500, () => pushSettled(stack, fake, p, commit));
  const patched = await adminCall(stack, 'PATCH', `/v1/projects/${p.id}`, 200, {
    forge_token: null,
  });
  assert.equal(patched.body.project.commit_statuses, 'off: the project has no forge token');

  const summary = await sweepDue(stack, jobId);
  assert.equal(summary.statuses_given_up, 1);
  const rows = await outbox(stack, jobId);
  assert.equal(rows[1]!.result, 'gave_up');
  assert.equal(rows[1]!.last_error, 'the project has no forge token');

  assert.equal((await runTasks(stack, p)).at(-1), 'success');
  assert.equal((await outbox(stack, jobId)).length, 2, 'the end of the job is not recorded');
  assert.deepEqual(seen(fake.acceptedFor(commit)), []);
});
