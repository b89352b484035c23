// Manual runs with inputs (issue #29), through the local stack: a run
// without a sha takes the ref's head (git for a repository on this machine;
// GitHub's and Gitea's branch APIs below, against a fake), its inputs reach
// the script's environment as CONDUCTOR_INPUT_<NAME> and `${{ inputs.x }}`,
// and an undeclared, mistyped or missing input answers 400 naming the input
// and what was expected (#48), before any job is made.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { resolveHead } from '../../lib/forge/branch.ts';
import { allowPrivateForges } from '../../lib/forge/client.ts';
import { taskVariables } from '../../runner/env.ts';
import type { Task } from '../../runner/protocol.ts';
import { testStack } from '../helpers/stack.ts';
import { claimTask, createProject, createWorker, waitForJob } from './calls.ts';

const stack = await testStack(import.meta.filename);
const repo = await mkdtemp(join(tmpdir(), 'conductor-inputs-'));
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
  env:
    type: choice
    options: [staging, prod]
    default: staging
  dry_run:
    type: boolean
    default: true
  count:
    type: number
    required: true
  note:
    type: string
tasks:
  deploy:
    labels: [inputs]
    env:
      TARGET: "deploy-\${{ inputs.env }}"
    script: ["./deploy --env \${{ inputs.env }} --count \${{ inputs.count }}"]
`,
);
git('add', '.');
git('commit', '-q', '-m', 'pipeline');
const head = git('rev-parse', 'HEAD');
await createProject(stack, {
  id: 'inputs',
  name: 'inputs',
  forge: 'github',
  repo: 'acme/inputs',
  repo_url: repo,
});
const worker = await createWorker(stack, ['inputs']);

function run(body: Record<string, unknown>) {
  return stack.call('POST', '/v1/projects/inputs/jobs', { token: stack.adminToken, body });
}

// biome-ignore lint/suspicious/noTemplateCurlyInString: the pipeline's own ${{ inputs.x }} syntax
test('a run without a sha takes the head of the branch, and its inputs reach the script as CONDUCTOR_INPUT_<NAME> and ${{ inputs.x }}', async () => {
  const res = await run({ ref: 'main', inputs: { env: 'prod', count: 3, dry_run: 'false' } });
  assert.equal(res.status, 202, res.text);
  const view = await waitForJob(stack, res.body.job_id);
  assert.equal(view.job.state, 'running', JSON.stringify(view.job));
  assert.equal(view.job.sha, head);
  assert.equal(view.job.trigger, 'manual');
  const task = (await claimTask(stack, worker.token, {})) as Task;
  assert.deepEqual(task.script, ['./deploy --env prod --count 3']);
  const vars = taskVariables(task, { workspace: '/w', outputFile: '/w/.out' });
  assert.equal(vars.CONDUCTOR_INPUT_ENV, 'prod');
  assert.equal(vars.CONDUCTOR_INPUT_COUNT, '3');
  assert.equal(vars.CONDUCTOR_INPUT_DRY_RUN, 'false');
  assert.equal(vars.CONDUCTOR_INPUT_NOTE, undefined, 'an input without value or default is unset');
  assert.equal(vars.TARGET, 'deploy-prod');
  const done = await stack.call('POST', `/v1/runner/tasks/${task.id}/complete`, {
    token: worker.token,
    body: { lease_id: task.lease_id, outcome: 'success', exit_code: 0 },
  });
  assert.equal(done.status, 200, done.text);
});

test('undeclared and mistyped inputs answer 400 at once, naming each input and what was expected; no job is made', async () => {
  const before = await stack.call('GET', '/v1/projects/inputs/jobs', { token: stack.adminToken });
  const res = await run({ ref: 'main', inputs: { env: 'qa', count: 'many', region: 'eu' } });
  assert.equal(res.status, 400, res.text);
  assert.equal(
    res.body.error.message,
    `inputs.region: not declared by .conductor.yml at ${head.slice(0, 12)}; the pipeline declares "env", "dry_run", "count", "note"; ` +
      'inputs.env: expected one of "staging", "prod", got "qa"; ' +
      'inputs.count: expected a number, got "many"',
  );
  const after = await stack.call('GET', '/v1/projects/inputs/jobs', { token: stack.adminToken });
  assert.equal(after.body.jobs.length, before.body.jobs.length, 'no job was made');
});

test('a required input left out answers 400 naming it', async () => {
  const res = await run({ ref: 'main', inputs: { env: 'prod' } });
  assert.equal(res.status, 400, res.text);
  assert.equal(res.body.error.message, 'inputs.count: is required (a number) and was not given');
});

test('the compile still checks the inputs when the file could not be read first: a forge that does not answer makes the job', async () => {
  const seen: string[] = [];
  const down = createServer((req, res) => {
    seen.push(`${req.method} ${req.url}`);
    res.writeHead(503, { 'content-type': 'application/json' });
    res.end('{}');
  });
  await new Promise<void>((r) => down.listen(0, '127.0.0.1', r));
  after(() => new Promise<void>((r) => down.close(() => r())));
  allowPrivateForges(true);
  await createProject(stack, {
    id: 'inputs-down',
    name: 'inputs-down',
    forge: 'gitea',
    repo: 'acme/down',
    repo_url: 'https://gitea.invalid/acme/down.git',
    forge_url: `http://127.0.0.1:${(down.address() as AddressInfo).port}`,
  });
  const res = await stack.call('POST', '/v1/projects/inputs-down/jobs', {
    token: stack.adminToken,
    body: { ref: 'main', sha: 'd'.repeat(40), inputs: { nope: 'x' } },
  });
  assert.equal(res.status, 202, res.text);
  assert.ok(
    seen.some((line) => line.includes('/acme/down/') && line.includes('.conductor.yml')),
    seen.join('\n'),
  );
  const view = await stack.call('GET', `/v1/jobs/${res.body.job_id}`, { token: stack.adminToken });
  assert.equal(view.body.job.state, 'pending', 'left for the compile, which waits for the forge');
});

test('bad requests name the field: a branch with no head, inputs of the wrong shape', async () => {
  const gone = await run({ ref: 'gone' });
  assert.equal(gone.status, 400);
  assert.match(gone.body.error.message, /^ref: branch gone does not exist in /);
  const shape = await run({ ref: 'main', inputs: { env: ['a'] } });
  assert.equal(shape.status, 400);
  assert.match(shape.body.error.message, /inputs\.env/);
  const unknown = await run({ ref: 'main', input: { env: 'prod' } });
  assert.equal(unknown.status, 400);
});

test('the head of a branch, a tag and the default branch from GitHub and Gitea (lib/forge/branch.ts)', async () => {
  const sha = 'c'.repeat(40);
  const seen: string[] = [];
  const server = createServer((req, res) => {
    seen.push(`${req.method} ${req.url} ${req.headers.authorization ?? ''}`);
    const answer = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    if (req.url === '/repos/acme/app') return answer(200, { default_branch: 'trunk' });
    if (req.url === '/repos/acme/app/commits/heads/trunk') return answer(200, { sha });
    if (req.url === '/repos/acme/app/commits/tags/v1') return answer(200, { sha });
    if (req.url === '/api/v1/repos/acme/app/branches/main')
      return answer(200, { commit: { id: sha } });
    if (req.url === '/repos/acme/app/commits/heads/down') return answer(503, {});
    return answer(404, { message: 'Not Found' });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  after(() => new Promise<void>((r) => server.close(() => r())));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  allowPrivateForges(true);
  const github = {
    forge: 'github' as const,
    repo: 'acme/app',
    repoUrl: 'https://github.com/acme/app.git',
    forgeUrl: null,
    githubApiUrl: url,
    token: 'gh-token',
  };
  assert.deepEqual(await resolveHead(github, null), { found: true, ref: 'refs/heads/trunk', sha });
  assert.deepEqual(await resolveHead(github, 'refs/tags/v1'), {
    found: true,
    ref: 'refs/tags/v1',
    sha,
  });
  assert.deepEqual(await resolveHead(github, 'nope'), {
    found: false,
    reason: 'branch nope does not exist in acme/app',
  });
  await assert.rejects(resolveHead(github, 'down'), { name: 'ForgeUnavailableError' });
  const gitea = { ...github, forge: 'gitea' as const, forgeUrl: url, token: 'gt-token' };
  assert.deepEqual(await resolveHead(gitea, 'main'), { found: true, ref: 'refs/heads/main', sha });
  assert.ok(seen.includes('GET /repos/acme/app/commits/heads/trunk Bearer gh-token'));
  assert.ok(seen.includes('GET /api/v1/repos/acme/app/branches/main token gt-token'));
});
