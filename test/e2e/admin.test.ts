import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';
import { assertError, assertJobShape, assertTime } from './assertions.ts';
import {
  claim,
  claimTask,
  complete,
  createWorker,
  getJob,
  type Json,
  putSecret,
  startE2E,
  waitForJob,
} from './calls.ts';
import { pipeline, sha } from './payloads.ts';

const { fake, stack, addProject } = await startE2E(import.meta.filename);
const admin = { token: stack.adminToken };
const ONE_TASK = '  a:\n    script: [make]\n';

/** POST /v1/projects/{project}/jobs as the admin: a manual trigger. */
function triggerJob(project: string, body: { ref: string; sha: string }) {
  return stack.call('POST', `/v1/projects/${project}/jobs`, { ...admin, body });
}

test('a project round trip: create, get, list, patch, delete, and then 404', async () => {
  const fields = {
    id: 'round-trip',
    name: 'Round trip',
    forge: 'gitea',
    repo: 'acme/round-trip',
    repo_url: 'https://gitea.example/acme/round-trip.git',
    forge_url: 'https://gitea.example',
  };
  const created = await stack.call('POST', '/v1/projects', {
    ...admin,
    body: {
      ...fields,
      forge_token: 'gitea-token-secret',
      cancel_superseded: false,
    },
  });
  assert.equal(created.status, 201, created.text);
  const secret: string = created.body.webhook_secret;
  assert.ok(secret.length >= 16);
  const project = created.body.project;
  assert.deepEqual(
    {
      id: project.id,
      name: project.name,
      forge: project.forge,
      repo: project.repo,
      repo_url: project.repo_url,
      forge_url: project.forge_url,
      enabled: project.enabled,
      cancel_superseded: project.cancel_superseded,
      has_forge_token: project.has_forge_token,
    },
    {
      ...fields,
      enabled: true,
      cancel_superseded: false,
      has_forge_token: true,
    },
  );
  assertTime(project.created_at);
  assert.ok(!created.text.includes('gitea-token-secret'), 'the token is never shown');

  const again = await stack.call('POST', '/v1/projects', {
    ...admin,
    body: {
      id: 'round-trip',
      name: 'x',
      forge: 'github',
      repo: 'acme/other',
      repo_url: 'https://github.com/acme/other.git',
    },
  });
  assertError(again, 409, 'conflict');

  const got = await stack.call('GET', '/v1/projects/round-trip', admin);
  assert.equal(got.status, 200);
  assert.deepEqual(got.body.project, project);
  for (const hidden of [secret, 'gitea-token-secret']) assert.ok(!got.text.includes(hidden));

  const listed = await stack.call('GET', '/v1/projects', admin);
  assert.equal(listed.status, 200);
  assert.ok(listed.body.projects.some((p: Json) => p.id === 'round-trip'));
  for (const hidden of [secret, 'gitea-token-secret']) assert.ok(!listed.text.includes(hidden));

  const patched = await stack.call('PATCH', '/v1/projects/round-trip', {
    ...admin,
    body: { name: 'Renamed', enabled: false, forge_token: null, cancel_superseded: true },
  });
  assert.equal(patched.status, 200, patched.text);
  assert.equal(patched.body.project.name, 'Renamed');
  assert.equal(patched.body.project.enabled, false);
  assert.equal(patched.body.project.has_forge_token, false);
  assert.equal(patched.body.project.cancel_superseded, true);
  assert.equal(patched.body.project.repo, 'acme/round-trip', 'fields not given stay');
  const empty = await stack.call('PATCH', '/v1/projects/round-trip', { ...admin, body: {} });
  assert.equal(empty.status, 200);
  assert.equal(empty.body.project.name, 'Renamed');
  assertError(
    await stack.call('PATCH', '/v1/projects/round-trip', { ...admin, body: { forge_url: null } }),
    400,
    'bad_request',
  );

  const gone = await stack.call('DELETE', '/v1/projects/round-trip', admin);
  assert.equal(gone.status, 204);
  assert.equal(gone.text, '');
  assertError(await stack.call('GET', '/v1/projects/round-trip', admin), 404, 'not_found');
  assertError(await stack.call('DELETE', '/v1/projects/round-trip', admin), 404, 'not_found');
  assertError(
    await stack.call('PATCH', '/v1/projects/round-trip', { ...admin, body: { name: 'x' } }),
    404,
    'not_found',
  );
  assertError(await stack.call('GET', '/v1/projects/round-trip/secrets', admin), 404, 'not_found');
  assertError(await stack.call('GET', '/v1/projects/round-trip/jobs', admin), 404, 'not_found');
  assertError(await triggerJob('round-trip', { ref: 'main', sha: sha('x') }), 404, 'not_found');
  const after = await stack.call('GET', '/v1/projects', admin);
  assert.ok(!after.body.projects.some((p: Json) => p.id === 'round-trip'));
});

test('two projects cannot watch the same repository on the same forge', async () => {
  await addProject({ forge: 'github', id: 'same-repo-1', name: 'one', repo: 'acme/same' });
  const clash = await stack.call('POST', '/v1/projects', {
    ...admin,
    body: {
      id: 'same-repo-2',
      name: 'two',
      forge: 'github',
      repo: 'acme/same',
      repo_url: 'https://github.com/acme/same.git',
    },
  });
  assertError(clash, 409, 'conflict');
});

test('secrets: list shows names and updated_at but never values; put replaces; delete removes', async () => {
  await addProject({ forge: 'github', id: 'secrets', repo: 'acme/secrets' });
  await putSecret(stack, 'secrets', 'NPM_TOKEN', 'npm-value-1');
  await putSecret(stack, 'secrets', 'AWS_KEY', 'aws-value-1');
  await putSecret(stack, 'secrets', 'NPM_TOKEN', 'npm-value-2');

  const list = await stack.call('GET', '/v1/projects/secrets/secrets', admin);
  assert.equal(list.status, 200);
  assert.deepEqual(
    list.body.secrets.map((s: Json) => s.name),
    ['AWS_KEY', 'NPM_TOKEN'],
  );
  for (const s of list.body.secrets) {
    assert.deepEqual(Object.keys(s).sort(), ['name', 'updated_at']);
    assertTime(s.updated_at);
  }
  for (const value of ['npm-value-1', 'npm-value-2', 'aws-value-1']) {
    assert.ok(!list.text.includes(value));
  }

  const deleted = await stack.call('DELETE', '/v1/projects/secrets/secrets/AWS_KEY', admin);
  assert.equal(deleted.status, 204);
  assertError(
    await stack.call('DELETE', '/v1/projects/secrets/secrets/AWS_KEY', admin),
    404,
    'not_found',
  );
  const after = await stack.call('GET', '/v1/projects/secrets/secrets', admin);
  assert.deepEqual(
    after.body.secrets.map((s: Json) => s.name),
    ['NPM_TOKEN'],
  );
  assertError(
    await stack.call('PUT', '/v1/projects/nobody/secrets/X', { ...admin, body: { value: 'v' } }),
    404,
    'not_found',
  );
});

test('workers: register shows the token once, list shows labels and never tokens, delete revokes', async () => {
  const created = await stack.call('POST', '/v1/workers', {
    ...admin,
    body: { name: 'builder-1', labels: ['linux', 'arm64', 'linux'] },
  });
  assert.equal(created.status, 201, created.text);
  const { worker, token } = created.body;
  assert.equal(typeof token, 'string');
  assert.equal(worker.name, 'builder-1');
  assert.deepEqual([...worker.labels].sort(), ['arm64', 'linux']);
  assert.equal(worker.revoked, false);
  assert.equal(worker.last_seen_at, null);
  assertTime(worker.created_at);

  // A claim is a sign of life.
  assert.equal((await claim(stack, token)).status, 204);
  const list = await stack.call('GET', '/v1/workers', admin);
  assert.equal(list.status, 200);
  assert.ok(!list.text.includes(token));
  const row = list.body.workers.find((w: Json) => w.id === worker.id);
  for (const field of ['id', 'name', 'labels', 'created_at', 'last_seen_at', 'revoked']) {
    assert.ok(field in row, field);
  }
  assertTime(row.last_seen_at);

  assert.equal((await stack.call('DELETE', `/v1/workers/${worker.id}`, admin)).status, 204);
  const revoked = await stack.call('GET', '/v1/workers', admin);
  assert.equal(revoked.body.workers.find((w: Json) => w.id === worker.id).revoked, true);
  assertError(await stack.call('DELETE', `/v1/workers/${randomUUID()}`, admin), 404, 'not_found');
});

test('a manual trigger makes a trusted job for the ref and sha given', async () => {
  const repo = 'acme/manual';
  await addProject({ forge: 'github', id: 'manual', repo });
  const commit = sha('manual');
  fake.setFile(repo, commit, pipeline('manual', ONE_TASK));
  const res = await triggerJob('manual', { ref: 'release/1.0', sha: commit.toUpperCase() });
  assert.equal(res.status, 202, res.text);
  assert.deepEqual(Object.keys(res.body).sort(), ['job_id', 'number']);
  const view = await waitForJob(stack, res.body.job_id);
  assertJobShape(view.job);
  assert.equal(view.job.state, 'running', JSON.stringify(view.job));
  assert.equal(view.job.trigger, 'manual');
  assert.equal(view.job.ref, 'refs/heads/release/1.0');
  assert.equal(view.job.sha, commit);
  assert.equal(view.job.trusted, true);
  // Read twice: for its inputs before the job is made (#48), then by the compile.
  assert.equal(fake.requestsFor(commit).length, 2);

  const tag = await triggerJob('manual', { ref: 'refs/tags/v1.0.0', sha: commit });
  assert.equal(tag.status, 202);
  assert.equal((await getJob(stack, tag.body.job_id)).job.ref, 'refs/tags/v1.0.0');
});

test('rerun: 409 while the job runs; failed_only keeps successful tasks and runs the rest again', async () => {
  const repo = 'acme/rerun';
  const label = 'rerun';
  await addProject({ forge: 'github', id: 'rerun', repo });
  const commit = sha('rerun');
  fake.setFile(
    repo,
    commit,
    pipeline(
      label,
      '  build:\n    outputs: [version]\n    script: [make]\n  test:\n    needs: [build]\n    script: [make test]\n',
    ),
  );
  const trigger = await triggerJob('rerun', { ref: 'main', sha: commit });
  const jobId: string = trigger.body.job_id;
  await waitForJob(stack, jobId);
  const { token } = await createWorker(stack, [label]);

  assertError(
    await stack.call('POST', `/v1/jobs/${jobId}/rerun`, { ...admin, body: { failed_only: true } }),
    409,
    'conflict',
  );

  const build = await claimTask(stack, token);
  await complete(stack, token, build.id, {
    lease_id: build.lease_id,
    outcome: 'success',
    outputs: { version: '7' },
  });
  const test1 = await claimTask(stack, token);
  const failed = await complete(stack, token, test1.id, {
    lease_id: test1.lease_id,
    outcome: 'failed',
    exit_code: 1,
  });
  assert.deepEqual(failed.body, { state: 'failed', job_state: 'failed' });

  const rerun = await stack.call('POST', `/v1/jobs/${jobId}/rerun`, {
    ...admin,
    body: { failed_only: true },
  });
  assert.equal(rerun.status, 202, rerun.text);
  assert.notEqual(rerun.body.job_id, jobId);
  assert.equal(rerun.body.number, trigger.body.number + 1);
  const view = await waitForJob(stack, rerun.body.job_id);
  assert.equal(view.job.state, 'running');
  assert.equal(view.job.trigger, 'rerun');
  assert.equal(view.job.rerun_of, jobId);
  assert.equal(view.job.sha, commit);
  assert.equal(view.job.ref, 'refs/heads/main');
  const states = Object.fromEntries(view.tasks.map((t: Json) => [t.name, t.state]));
  assert.deepEqual(states, { build: 'success', test: 'queued' });
  assert.deepEqual(view.tasks[0].outputs, { version: '7' });

  // Only the failed task runs again, with the kept task's outputs.
  const test2 = await claimTask(stack, token);
  assert.equal(test2.name, 'test');
  assert.equal(test2.job_id, rerun.body.job_id);
  assert.deepEqual(test2.needs_outputs, { build: { version: '7' } });
  const ok = await complete(stack, token, test2.id, {
    lease_id: test2.lease_id,
    outcome: 'success',
  });
  assert.deepEqual(ok.body, { state: 'success', job_state: 'success' });

  // A full rerun (the default) runs everything.
  const full = await stack.call('POST', `/v1/jobs/${jobId}/rerun`, { ...admin, body: {} });
  assert.equal(full.status, 202, full.text);
  const fullView = await waitForJob(stack, full.body.job_id);
  assert.deepEqual(
    fullView.tasks.map((t: Json) => t.state),
    ['queued', 'waiting'],
  );
  assertError(
    await stack.call('POST', `/v1/jobs/${randomUUID()}/rerun`, { ...admin, body: {} }),
    404,
    'not_found',
  );
});

test('a rerun of a job that never compiled reads the pipeline file again', async () => {
  const repo = 'acme/rerun-compile';
  await addProject({ forge: 'github', id: 'rerun-compile', name: 'rerun compile', repo });
  const commit = sha('rerun-compile');
  const first = await triggerJob('rerun-compile', { ref: 'main', sha: commit });
  const failed = await waitForJob(stack, first.body.job_id);
  assert.equal(failed.job.state, 'failed');
  // The file is pushed (say, the forge had lost it); the rerun finds it.
  fake.setFile(repo, commit, pipeline('rerun-compile', ONE_TASK));
  const rerun = await stack.call('POST', `/v1/jobs/${first.body.job_id}/rerun`, {
    ...admin,
    body: {},
  });
  assert.equal(rerun.status, 202, rerun.text);
  const view = await waitForJob(stack, rerun.body.job_id);
  assert.equal(view.job.state, 'running', JSON.stringify(view.job));
  // The trigger's input check and the first compile found no file; the rerun's compile did.
  assert.equal(fake.requestsFor(commit).length, 3);
});

test('the job list pages newest first with limit and before', async () => {
  await addProject({
    forge: 'github',
    id: 'paging',
    repo: 'acme/paging',
    cancel_superseded: false,
  });
  const numbers: number[] = [];
  for (let i = 0; i < 25; i++) {
    const res = await triggerJob('paging', { ref: `b${i}`, sha: sha(`paging-${i}`) });
    assert.equal(res.status, 202);
    numbers.push(res.body.number);
  }
  assert.deepEqual(
    numbers,
    Array.from({ length: 25 }, (_, i) => i + 1),
  );
  const page = async (query: string) => {
    const res = await stack.call('GET', `/v1/projects/paging/jobs${query}`, admin);
    assert.equal(res.status, 200, res.text);
    return res.body.jobs.map((j: Json) => j.number);
  };
  assert.deepEqual(
    await page(''),
    Array.from({ length: 20 }, (_, i) => 25 - i),
    'limit defaults to 20',
  );
  assert.deepEqual(await page('?limit=3'), [25, 24, 23]);
  assert.deepEqual(await page('?limit=3&before=23'), [22, 21, 20]);
  assert.deepEqual(await page('?limit=100&before=3'), [2, 1]);
  assert.deepEqual(await page('?before=1'), []);
  assert.equal((await page('?limit=100')).length, 25);
  const res = await stack.call('GET', '/v1/projects/paging/jobs?limit=1', admin);
  assertJobShape(res.body.jobs[0]);
  assert.equal(typeof res.body.jobs[0].number, 'number');
});

test('deleting a project takes its jobs with it', async () => {
  const repo = 'acme/doomed';
  await addProject({ forge: 'github', id: 'doomed', repo });
  const commit = sha('doomed');
  fake.setFile(repo, commit, pipeline('doomed', ONE_TASK));
  const res = await triggerJob('doomed', { ref: 'main', sha: commit });
  const view = await waitForJob(stack, res.body.job_id);
  assert.equal((await stack.call('DELETE', '/v1/projects/doomed', admin)).status, 204);
  assertError(await stack.call('GET', `/v1/jobs/${res.body.job_id}`, admin), 404, 'not_found');
  assertError(
    await stack.call('GET', `/v1/tasks/${view.tasks[0].id}/log`, admin),
    404,
    'not_found',
  );
  const { token } = await createWorker(stack, ['doomed']);
  assert.equal((await claim(stack, token)).status, 204);
});
