// Projects that get no statuses: without a forge token, or with a repository
// that is a local path. Nothing is recorded, nothing is posted, and the project
// view says why.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { pathToFileURL } from 'node:url';
import { waitForJob } from '../e2e/calls.ts';
import { sha } from '../e2e/payloads.ts';
import {
  adminCall,
  makeProject,
  ONE_TASK,
  outbox,
  pipelineFile,
  push,
  runTasks,
  type StatusProject,
  statusStack,
  sweepAllDue,
} from './support.ts';

const { fake, stack } = await statusStack(import.meta.filename);

const NO_TOKEN = 'off: the project has no forge token';
const LOCAL = 'off: the repository is not on a forge (a local path)';

async function projectView(id: string) {
  return (await adminCall(stack, 'GET', `/v1/projects/${id}`, 200)).body.project;
}

/** Runs a job for `commit` to success; answers its id once the sweep has run. */
async function runToSuccess(p: StatusProject, commit: string): Promise<string> {
  const jobId = await push(stack, p, commit);
  const view = await waitForJob(stack, jobId);
  assert.equal(view.job.state, 'running', JSON.stringify(view.job));
  assert.equal((await runTasks(stack, p)).at(-1), 'success');
  await sweepAllDue(stack);
  return jobId;
}

for (const forge of ['github', 'gitea'] as const) {
  test(`${forge}: a project without a forge token posts no status, records none, and its view says statuses are off`, async () => {
    const p = await makeProject(stack, fake, forge, `${forge}-tokenless`, { forgeToken: null });
    assert.equal(p.view.has_forge_token, false);
    assert.equal(p.view.commit_statuses, NO_TOKEN);
    assert.equal((await projectView(p.id)).commit_statuses, NO_TOKEN);
    const list = await stack.call('GET', '/v1/projects', { token: stack.adminToken });
    assert.equal(
      list.body.projects.find((x: { id: string }) => x.id === p.id).commit_statuses,
      NO_TOKEN,
    );

    const commit = sha(`${forge}-tokenless`);
    fake.setFile(p.repo, commit, pipelineFile(p.label, ONE_TASK));
    const jobId = await runToSuccess(p, commit);
    assert.equal(fake.files.requestsFor(commit).length, 1, 'the pipeline file was read');
    assert.deepEqual(fake.statusesFor(commit), []);
    assert.deepEqual(await outbox(stack, jobId), []);
  });
}

test('adding a forge token turns statuses on in the view; removing it turns them off', async () => {
  const p = await makeProject(stack, fake, 'github', 'toggle', { forgeToken: null });
  const on = await adminCall(stack, 'PATCH', `/v1/projects/${p.id}`, 200, {
    forge_token: 'ghp_toggled',
  });
  assert.equal(on.body.project.commit_statuses, 'on');
  assert.equal((await projectView(p.id)).commit_statuses, 'on');
  const off = await adminCall(stack, 'PATCH', `/v1/projects/${p.id}`, 200, { forge_token: null });
  assert.equal(off.body.project.commit_statuses, NO_TOKEN);
});

const root = mkdtempSync(join(tmpdir(), 'conductor-statuses-'));
after(() => rmSync(root, { recursive: true, force: true }));

function localRepo(name: string, text: string): { path: string; commit: string } {
  const path = join(root, name);
  const git = (...args: string[]) =>
    execFileSync(
      'git',
      ['-c', 'user.name=t', '-c', 'user.email=t@t', '-c', 'init.defaultBranch=main', ...args],
      { cwd: path, encoding: 'utf8', env: { ...process.env, GIT_CONFIG_NOSYSTEM: '1' } },
    ).trim();
  mkdirSync(path, { recursive: true });
  git('init', '-q');
  writeFileSync(join(path, '.conductor.yml'), text);
  git('add', '.');
  git('commit', '-q', '-m', 'pipeline');
  return { path, commit: git('rev-parse', 'HEAD') };
}

for (const [how, url] of [
  ['an absolute path', (path: string) => path],
  ['a file:// URL', (path: string) => pathToFileURL(path).href],
] as const) {
  test(`a repository at ${how} posts no status even with a forge token, and its view says it is not on a forge`, async () => {
    const id = how === 'an absolute path' ? 'local-path' : 'local-file-url';
    const { path, commit } = localRepo(id, pipelineFile(id, ONE_TASK));
    const p = await makeProject(stack, fake, 'github', id, { repoUrl: url(path) });
    assert.equal(p.view.has_forge_token, true);
    assert.equal(p.view.commit_statuses, LOCAL);
    assert.equal((await projectView(p.id)).commit_statuses, LOCAL);

    const jobId = await runToSuccess(p, commit);
    assert.deepEqual(fake.statusesFor(commit), []);
    assert.deepEqual(fake.files.requestsFor(commit), [], 'read from the repository, not a forge');
    assert.deepEqual(await outbox(stack, jobId), []);
  });
}
