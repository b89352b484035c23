// A rerun of a manual job that never compiled keeps the inputs it was given
// (issue #29 review): it compiles with them, as the first run was triggered.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import type { Task } from '../../runner/protocol.ts';
import { claimTask, createProject, createWorker, waitForJob } from '../e2e/calls.ts';
import { testStack } from '../helpers/stack.ts';

const stack = await testStack(import.meta.filename);
const repo = await mkdtemp(join(tmpdir(), 'rerun-inputs-'));
after(() => rm(repo, { recursive: true, force: true }));
const git = (...args: string[]) =>
  execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', ...args], { cwd: repo })
    .toString()
    .trim();
git('init', '-q', '-b', 'main');
await writeFile(
  join(repo, '.conductor.yml'),
  `version: 1
inputs:
  dry_run:
    type: boolean
    default: false
tasks:
  deploy:
    labels: [r29]
    script: ["./deploy --dry-run=\${{ inputs.dry_run }}"]
  announce:
    labels: [r29-announce]
    when: {trigger: [manual]}
    script: ["./announce"]
`,
);
git('add', '.');
git('commit', '-q', '-m', 'pipeline');
const head = git('rev-parse', 'HEAD');
await createProject(stack, {
  id: 'rr',
  name: 'rr',
  forge: 'github',
  repo: 'acme/rr',
  repo_url: repo,
});
const worker = await createWorker(stack, ['r29']);

test('a rerun of a manual run whose pipeline could not be read runs with the inputs it was given (dry_run stays true)', async () => {
  // A run asking for a dry run whose pipeline file cannot be read (the
  // repository away), so it never compiles.
  await stack.context.pool.query(`update projects set repo_url = $2 where id = $1`, [
    'rr',
    `${repo}-gone`,
  ]);
  const res = await stack.call('POST', '/v1/projects/rr/jobs', {
    token: stack.adminToken,
    body: { ref: 'main', sha: head, inputs: { dry_run: true } },
  });
  assert.equal(res.status, 202, res.text);
  const first = await waitForJob(stack, res.body.job_id);
  assert.equal(first.job.state, 'failed', JSON.stringify(first.job));
  assert.equal(first.job.started_at, null);
  // The repository is back; the person asks for a rerun.
  await stack.context.pool.query(`update projects set repo_url = $2 where id = $1`, ['rr', repo]);
  const rerun = await stack.call('POST', `/v1/jobs/${res.body.job_id}/rerun`, {
    token: stack.adminToken,
    body: {},
  });
  assert.equal(rerun.status, 202, rerun.text);
  const second = await waitForJob(stack, rerun.body.job_id);
  assert.deepEqual(second.job.inputs, { dry_run: true });
  const task = (await claimTask(stack, worker.token, {})) as Task | null;
  // The runner is told to do a dry run, not a real deploy.
  assert.deepEqual(task?.script, ['./deploy --dry-run=true']);
  // Compiled as the manual run it reruns: the manual-only task is part of it.
  const names = (second.tasks as { name: string }[]).map((t) => t.name).sort();
  assert.deepEqual(names, ['announce', 'deploy']);
});

test('a rerun of a manual run with a mistyped input fails naming it (its inputs are kept)', async () => {
  // Read at once, the file refuses the mistyped input with a 400 (#48) ...
  const refused = await stack.call('POST', '/v1/projects/rr/jobs', {
    token: stack.adminToken,
    body: { ref: 'main', sha: head, inputs: { dry_run: true, dryrun: true } },
  });
  assert.equal(refused.status, 400, refused.text);
  assert.match(refused.body.error.message, /^inputs\.dryrun: not declared/);
  // ... so the first run is one whose file could not be read then.
  await stack.context.pool.query(`update projects set repo_url = $2 where id = $1`, [
    'rr',
    `${repo}-gone`,
  ]);
  const res = await stack.call('POST', '/v1/projects/rr/jobs', {
    token: stack.adminToken,
    body: { ref: 'main', sha: head, inputs: { dry_run: true, dryrun: true } },
  });
  assert.equal(res.status, 202, res.text);
  const first = await waitForJob(stack, res.body.job_id);
  assert.equal(first.job.state, 'failed', JSON.stringify(first.job));
  await stack.context.pool.query(`update projects set repo_url = $2 where id = $1`, ['rr', repo]);
  const rerun = await stack.call('POST', `/v1/jobs/${res.body.job_id}/rerun`, {
    token: stack.adminToken,
    body: {},
  });
  assert.equal(rerun.status, 202, rerun.text);
  const second = await waitForJob(stack, rerun.body.job_id);
  // Before: the rerun dropped the inputs and ran a real deploy (dry_run=false).
  assert.equal(second.job.state, 'failed', JSON.stringify(second.job));
  assert.match(String(second.job.error), /dryrun/);
  assert.deepEqual(second.job.inputs, { dry_run: true, dryrun: true });
});
