// Shared pieces of the end-to-end tests: forge payloads shaped like real
// GitHub and Gitea deliveries, signed sends, and the few calls every test makes.
import assert from 'node:assert/strict';
import { createHash, randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { signBody } from '../../lib/forge/webhook.ts';
import { type FakeForge, startFakeForge } from '../helpers/fake-forge.ts';
import { type TestStack, testStack } from '../helpers/stack.ts';

export type Forge = 'github' | 'gitea';

/** A JSON value from the API, read field by field in assertions. */
// biome-ignore lint/suspicious/noExplicitAny: answers are checked by assertions, not by types.
export type Json = any;
export type Reply = Awaited<ReturnType<TestStack['call']>>;

/** A commit sha that looks like a real one and is the same for the same seed. */
export function sha(seed: string): string {
  return createHash('sha1').update(seed).digest('hex');
}

export const ZERO_SHA = '0'.repeat(40);

/**
 * A pipeline whose every task carries `label` (through defaults), so only a
 * worker registered with that label can claim it: tests of one file share a
 * database and must not take each other's tasks.
 */
export function pipeline(label: string, tasks: string): string {
  return `version: 1
name: e2e
defaults:
  labels: [${label}]
tasks:
${tasks}`;
}

// ---------------------------------------------------------------- payloads

function githubUser(login: string, id: number) {
  return {
    login,
    id,
    node_id: `MDQ6VXNlcj${id}`,
    avatar_url: `https://avatars.githubusercontent.com/u/${id}?v=4`,
    url: `https://api.github.com/users/${login}`,
    html_url: `https://github.com/${login}`,
    type: 'User',
    site_admin: false,
  };
}

function githubRepo(fullName: string, id = 501_234) {
  const [owner = 'owner', name = 'name'] = fullName.split('/');
  return {
    id,
    node_id: `R_kgDOH${id}`,
    name,
    full_name: fullName,
    private: false,
    owner: githubUser(owner, id + 1),
    html_url: `https://github.com/${fullName}`,
    description: null,
    fork: false,
    url: `https://api.github.com/repos/${fullName}`,
    clone_url: `https://github.com/${fullName}.git`,
    ssh_url: `git@github.com:${fullName}.git`,
    default_branch: 'main',
    visibility: 'public',
    pushed_at: 1_717_489_315,
  };
}

function githubCommit(repo: string, id: string) {
  return {
    id,
    tree_id: sha(`tree-${id}`),
    distinct: true,
    message: 'Update the ledger',
    timestamp: '2024-06-04T10:21:49+02:00',
    url: `https://github.com/${repo}/commit/${id}`,
    author: { name: 'Rosa Lind', email: 'rosa@example.com', username: 'rosalind' },
    committer: { name: 'GitHub', email: 'noreply@github.com', username: 'web-flow' },
    added: [],
    removed: [],
    modified: ['README.md'],
  };
}

/** A GitHub `push` delivery (X-GitHub-Event: push). */
export function githubPush(
  repo: string,
  after: string,
  opts: { ref?: string; before?: string; deleted?: boolean } = {},
) {
  const ref = opts.ref ?? 'refs/heads/main';
  const deleted = opts.deleted ?? false;
  const before = opts.before ?? sha(`before-${after}`);
  return {
    ref,
    before,
    after: deleted ? ZERO_SHA : after,
    repository: githubRepo(repo),
    pusher: { name: 'rosalind', email: 'rosa@example.com' },
    sender: githubUser('rosalind', 90_211),
    created: false,
    deleted,
    forced: false,
    base_ref: null,
    compare: `https://github.com/${repo}/compare/${before.slice(0, 12)}...${after.slice(0, 12)}`,
    commits: deleted ? [] : [githubCommit(repo, after)],
    head_commit: deleted ? null : githubCommit(repo, after),
  };
}

/** A GitHub `pull_request` delivery; `headRepo` differs from `repo` for a fork. */
export function githubPullRequest(
  repo: string,
  opts: {
    number: number;
    action: string;
    headSha: string;
    headRepo?: string | null;
    baseRef?: string;
  },
) {
  const headRepo = opts.headRepo === undefined ? repo : opts.headRepo;
  const headOwner = (headRepo ?? 'ghost/x').split('/')[0]!;
  const baseRef = opts.baseRef ?? 'main';
  return {
    action: opts.action,
    number: opts.number,
    pull_request: {
      url: `https://api.github.com/repos/${repo}/pulls/${opts.number}`,
      id: 1_900_000_000 + opts.number,
      node_id: `PR_kwDOH${opts.number}`,
      html_url: `https://github.com/${repo}/pull/${opts.number}`,
      number: opts.number,
      state: opts.action === 'closed' ? 'closed' : 'open',
      locked: false,
      title: 'Multi-currency postings',
      user: githubUser(headOwner, 7_712_093),
      body: null,
      created_at: '2024-06-03T14:02:11Z',
      updated_at: '2024-06-04T08:30:00Z',
      closed_at: opts.action === 'closed' ? '2024-06-04T09:00:00Z' : null,
      merged_at: null,
      merge_commit_sha: null,
      draft: false,
      head: {
        label: `${headOwner}:feature/multi-currency`,
        ref: 'feature/multi-currency',
        sha: opts.headSha,
        user: githubUser(headOwner, 7_712_093),
        repo:
          headRepo === null ? null : { ...githubRepo(headRepo, 777_001), fork: headRepo !== repo },
      },
      base: {
        label: `${repo.split('/')[0]}:${baseRef}`,
        ref: baseRef,
        sha: sha(`base-${opts.number}`),
        user: githubUser(repo.split('/')[0]!, 501_235),
        repo: githubRepo(repo),
      },
      merged: false,
      mergeable: null,
      commits: 3,
      additions: 120,
      deletions: 14,
      changed_files: 6,
    },
    repository: githubRepo(repo),
    sender: githubUser(headOwner, 7_712_093),
  };
}

function giteaUser(login: string, id: number) {
  return {
    id,
    login,
    login_name: '',
    full_name: login,
    email: `${login}@noreply.gitea.example`,
    avatar_url: `https://gitea.example/avatars/${id}`,
    username: login,
  };
}

function giteaRepo(fullName: string, id = 214) {
  const [owner = 'owner', name = 'name'] = fullName.split('/');
  return {
    id,
    owner: giteaUser(owner, id + 100),
    name,
    full_name: fullName,
    description: '',
    empty: false,
    private: false,
    fork: false,
    html_url: `https://gitea.example/${fullName}`,
    ssh_url: `git@gitea.example:${fullName}.git`,
    clone_url: `https://gitea.example/${fullName}.git`,
    default_branch: 'main',
    created_at: '2023-10-02T12:00:09Z',
    updated_at: '2024-06-04T06:45:30Z',
  };
}

function giteaCommit(repo: string, id: string) {
  return {
    id,
    message: 'Account for the spring-neap cycle\n',
    url: `https://gitea.example/${repo}/commit/${id}`,
    author: { name: 'Ines Alvarado', email: 'ines@example.com', username: 'ines' },
    committer: { name: 'Ines Alvarado', email: 'ines@example.com', username: 'ines' },
    verification: null,
    timestamp: '2024-06-04T08:45:12+02:00',
    added: [],
    removed: [],
    modified: ['tides.go'],
  };
}

/** A Gitea `push` delivery (X-Gitea-Event: push); a deletion has an all-zero `after`. */
export function giteaPush(
  repo: string,
  after: string,
  opts: { ref?: string; before?: string; deleted?: boolean } = {},
) {
  const deleted = opts.deleted ?? false;
  const before = opts.before ?? sha(`before-${after}`);
  return {
    ref: opts.ref ?? 'refs/heads/main',
    before,
    after: deleted ? ZERO_SHA : after,
    compare_url: `https://gitea.example/${repo}/compare/${before}...${after}`,
    commits: deleted ? [] : [giteaCommit(repo, after)],
    total_commits: deleted ? 0 : 1,
    head_commit: deleted ? null : giteaCommit(repo, after),
    repository: giteaRepo(repo),
    pusher: giteaUser('ines', 3),
    sender: giteaUser('ines', 3),
  };
}

/** A Gitea `pull_request` delivery; Gitea spells the update action `synchronized`. */
export function giteaPullRequest(
  repo: string,
  opts: { number: number; action: string; headSha: string; headRepo?: string; baseRef?: string },
) {
  const headRepo = opts.headRepo ?? repo;
  const baseRef = opts.baseRef ?? 'main';
  return {
    action: opts.action,
    number: opts.number,
    pull_request: {
      id: 80 + opts.number,
      url: `https://gitea.example/${repo}/pulls/${opts.number}`,
      number: opts.number,
      user: giteaUser(headRepo.split('/')[0]!, 7),
      title: 'Neap tide tables',
      body: '',
      state: opts.action === 'closed' ? 'closed' : 'open',
      is_locked: false,
      html_url: `https://gitea.example/${repo}/pulls/${opts.number}`,
      mergeable: true,
      merged: false,
      base: {
        label: baseRef,
        ref: baseRef,
        sha: sha(`gitea-base-${opts.number}`),
        repo_id: 214,
        repo: giteaRepo(repo),
      },
      head: {
        label: 'feature/neap',
        ref: 'feature/neap',
        sha: opts.headSha,
        repo_id: headRepo === repo ? 214 : 391,
        repo: { ...giteaRepo(headRepo, headRepo === repo ? 214 : 391), fork: headRepo !== repo },
      },
      merge_base: sha(`gitea-merge-base-${opts.number}`),
      created_at: '2024-06-03T10:00:00Z',
      updated_at: '2024-06-04T08:00:00Z',
    },
    requested_reviewer: null,
    repository: giteaRepo(repo),
    sender: giteaUser(headRepo.split('/')[0]!, 7),
    commit_id: '',
    review: null,
  };
}

// ---------------------------------------------------------------- webhooks

export interface SendOptions {
  /** The project's webhook secret; the signature is computed with it unless `signature` is given. */
  secret?: string;
  /** The signature header's value as sent; `null` leaves the header out. */
  signature?: string | null;
  /** The delivery id; `null` leaves the header out. Default: a new UUID. */
  delivery?: string | null;
  /** The event header; `null` leaves the header out. */
  event?: string | null;
  /** The body bytes as sent, instead of the payload's JSON. */
  raw?: string | Buffer;
}

/** Sends a delivery to /v1/webhooks/{forge} with that forge's headers. */
export function sendWebhook(
  stack: TestStack,
  forge: Forge,
  event: string,
  payload: unknown,
  opts: SendOptions = {},
): Promise<Reply> {
  const body = opts.raw ?? JSON.stringify(payload);
  const bytes = Buffer.isBuffer(body) ? body : Buffer.from(body, 'utf8');
  const delivery = opts.delivery === undefined ? randomUUID() : opts.delivery;
  const eventName = opts.event === undefined ? event : opts.event;
  const signature =
    opts.signature !== undefined
      ? opts.signature
      : opts.secret !== undefined
        ? signBody(forge, bytes, opts.secret)
        : null;
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (forge === 'github') {
    headers['user-agent'] = 'GitHub-Hookshot/7b4b1c2';
    headers['x-github-hook-id'] = '481516234';
    headers['x-github-hook-installation-target-type'] = 'repository';
    if (eventName !== null) headers['X-GitHub-Event'] = eventName;
    if (delivery !== null) headers['X-GitHub-Delivery'] = delivery;
    if (signature !== null) headers['X-Hub-Signature-256'] = signature;
  } else {
    headers['user-agent'] = 'Go-http-client/1.1';
    if (eventName !== null) {
      headers['X-Gitea-Event'] = eventName;
      headers['X-Gitea-Event-Type'] = eventName;
      headers['X-Gogs-Event'] = eventName;
    }
    if (delivery !== null) headers['X-Gitea-Delivery'] = delivery;
    if (signature !== null) headers['X-Gitea-Signature'] = signature;
  }
  return stack.call('POST', `/v1/webhooks/${forge}`, { raw: bytes, headers });
}

/**
 * Sends a signed delivery, asserts the 202 and waits for its job to leave
 * `pending`, asserting it runs; answers the webhook's reply and the job's view.
 */
export async function deliverRunning(
  stack: TestStack,
  forge: Forge,
  event: string,
  payload: unknown,
  secret: string,
): Promise<{ hook: Reply; view: Record<string, Json> }> {
  const hook = await sendWebhook(stack, forge, event, payload, { secret });
  assert.equal(hook.status, 202, hook.text);
  const view = await waitForJob(stack, hook.body.job_id);
  assert.equal(view.job.state, 'running', JSON.stringify(view.job));
  return { hook, view };
}

/**
 * Pushes `tasks` (every one labelled `label`, see pipeline()) to a GitHub
 * project on a branch named after the label, and waits for the job to run;
 * answers the job's id.
 */
export async function pushRunning(
  e2e: { fake: FakeForge; stack: TestStack },
  project: { repo: string; secret: string },
  label: string,
  tasks: string,
): Promise<string> {
  const commit = sha(label);
  e2e.fake.setFile(project.repo, commit, pipeline(label, tasks));
  const { hook } = await deliverRunning(
    e2e.stack,
    'github',
    'push',
    githubPush(project.repo, commit, { ref: `refs/heads/${label}` }),
    project.secret,
  );
  return hook.body.job_id;
}

// ---------------------------------------------------------------- API calls

export interface CreatedProject {
  project: Record<string, Json>;
  secret: string;
}

/** POST /v1/projects, asserting the 201. */
export async function createProject(
  stack: TestStack,
  body: Record<string, unknown>,
): Promise<CreatedProject> {
  const res = await stack.call('POST', '/v1/projects', { token: stack.adminToken, body });
  assert.equal(res.status, 201, res.text);
  assert.equal(typeof res.body.webhook_secret, 'string');
  return { project: res.body.project, secret: res.body.webhook_secret };
}

/**
 * A project as a test registers it: `repo_url` is the repository on its
 * forge's host and a Gitea project's `forge_url` is the fake forge, unless
 * given; `name` is the id unless given; any other field is sent as given.
 */
export interface ProjectSpec {
  forge: Forge;
  id: string;
  repo: string;
  name?: string;
  [field: string]: unknown;
}

/** POST /v1/projects for `spec` (see ProjectSpec), asserting the 201. */
export function addProject(
  stack: TestStack,
  fake: FakeForge,
  spec: ProjectSpec,
): Promise<CreatedProject> {
  const host = spec.forge === 'github' ? 'github.com' : 'gitea.example';
  return createProject(stack, {
    name: spec.id,
    repo_url: `https://${host}/${spec.repo}.git`,
    ...(spec.forge === 'gitea' ? { forge_url: fake.url } : {}),
    ...spec,
  });
}

export interface E2E<K extends string> {
  fake: FakeForge;
  stack: TestStack;
  /** The projects asked for, registered in the order given. */
  projects: Record<K, CreatedProject>;
  /** Registers one more project on this stack (see ProjectSpec). */
  addProject(spec: ProjectSpec): Promise<CreatedProject>;
}

/**
 * Starts a fake forge and the stack on the calling test file's own database,
 * reading GitHub through the fake forge unless `githubApi` is false, with
 * `env` on top; registers `projects`. Both stop when the file ends (the
 * after() hooks of startFakeForge and testStack).
 */
export async function startE2E<K extends string = never>(
  file: string,
  opts: {
    env?: Record<string, string>;
    githubApi?: boolean;
    projects?: Record<K, ProjectSpec>;
  } = {},
): Promise<E2E<K>> {
  const fake = await startFakeForge();
  const stack = await testStack(file, {
    ...(opts.githubApi === false ? {} : { CONDUCTOR_GITHUB_API_URL: fake.url }),
    ...opts.env,
  });
  const projects = {} as Record<K, CreatedProject>;
  for (const [key, spec] of Object.entries(opts.projects ?? {}) as [K, ProjectSpec][]) {
    projects[key] = await addProject(stack, fake, spec);
  }
  return { fake, stack, projects, addProject: (spec) => addProject(stack, fake, spec) };
}

/** POST /v1/workers, asserting the 201; answers the worker and its token. `untrusted` registers it for untrusted tasks. */
export async function createWorker(
  stack: TestStack,
  labels: string[],
  name = `runner-${labels.join('-') || 'any'}`,
  opts: { untrusted?: boolean } = {},
): Promise<{ worker: Record<string, Json>; token: string }> {
  const res = await stack.call('POST', '/v1/workers', {
    token: stack.adminToken,
    body: { name, labels, ...(opts.untrusted ? { untrusted: true } : {}) },
  });
  assert.equal(res.status, 201, res.text);
  return { worker: res.body.worker, token: res.body.token };
}

/** PUT /v1/projects/{id}/secrets/{name}, asserting the 204. */
export async function putSecret(stack: TestStack, project: string, name: string, value: string) {
  const res = await stack.call('PUT', `/v1/projects/${project}/secrets/${name}`, {
    token: stack.adminToken,
    body: { value },
  });
  assert.equal(res.status, 204, res.text);
}

/** GET /v1/jobs/{id}, asserting the 200. */
export async function getJob(stack: TestStack, jobId: string): Promise<Record<string, Json>> {
  const res = await stack.call('GET', `/v1/jobs/${jobId}`, { token: stack.adminToken });
  assert.equal(res.status, 200, res.text);
  return res.body;
}

/**
 * Polls GET /v1/jobs/{id} until `until` holds (default: the job left
 * `pending`), for at most 30 s (a deadline for a loaded machine, not a speed
 * claim); the compile runs after the webhook answered.
 */
export async function waitForJob(
  stack: TestStack,
  jobId: string,
  until: (view: Record<string, Json>) => boolean = (v) => v.job.state !== 'pending',
): Promise<Record<string, Json>> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const view = await getJob(stack, jobId);
    if (until(view)) return view;
    if (Date.now() > deadline) {
      assert.fail(`job ${jobId} did not reach the awaited state: ${JSON.stringify(view.job)}`);
    }
    await sleep(20);
  }
}

/** POST /v1/runner/claim. */
export function claim(stack: TestStack, token: string, body: unknown = {}): Promise<Reply> {
  return stack.call('POST', '/v1/runner/claim', { token, body });
}

/** Claims and asserts a task was handed out; answers the task. */
export async function claimTask(
  stack: TestStack,
  token: string,
  body: unknown = {},
): Promise<Record<string, Json>> {
  const res = await claim(stack, token, body);
  assert.equal(res.status, 200, `expected a task, got ${res.status} ${res.text}`);
  return res.body.task;
}

export function heartbeat(stack: TestStack, token: string, taskId: string, leaseId: string) {
  return stack.call('POST', `/v1/runner/tasks/${taskId}/heartbeat`, {
    token,
    body: { lease_id: leaseId },
  });
}

export function uploadLog(
  stack: TestStack,
  token: string,
  taskId: string,
  body: { lease_id: string; offset: number; data: string },
) {
  return stack.call('POST', `/v1/runner/tasks/${taskId}/logs`, { token, body });
}

export function complete(
  stack: TestStack,
  token: string,
  taskId: string,
  body: Record<string, unknown>,
) {
  return stack.call('POST', `/v1/runner/tasks/${taskId}/complete`, { token, body });
}

/** Rows in a table of the stack's database. */
export async function countRows(stack: TestStack, table: string): Promise<number> {
  const { rows } = await stack.context.pool.query<{ n: string }>(
    `select count(*)::text as n from ${table}`,
  );
  return Number(rows[0]!.n);
}

// ---------------------------------------------------------------- assertions

/** The contract's error shape with this status and code. */
export function assertError(res: Reply, status: number, code: string): void {
  assert.equal(res.status, status, `expected ${status}, got ${res.status}: ${res.text}`);
  assert.ok(res.body && typeof res.body.error === 'object', `no error object: ${res.text}`);
  assert.equal(res.body.error.code, code);
  assert.equal(typeof res.body.error.message, 'string');
  assert.ok(res.body.error.message.length > 0);
  assert.equal(typeof res.body.error.request_id, 'string');
  assert.ok(res.body.error.request_id.length > 0);
}

export function assertUnauthorized(res: Reply): void {
  assertError(res, 401, 'unauthorized');
}

/** A 400 whose message or one of whose `issues` names `field`. */
export function assertBadRequest(res: Reply, field?: string): void {
  assertError(res, 400, 'bad_request');
  if (field === undefined) return;
  const issues: { path: string; message: string }[] = res.body.error.issues ?? [];
  const named =
    res.body.error.message.includes(field) ||
    issues.some((i) => i.path === field || i.path.split('.').includes(field));
  assert.ok(named, `the 400 does not name ${field}: ${res.text}`);
}

/** An ISO-8601 UTC time string. */
export function assertTime(value: unknown, what = 'time'): void {
  assert.equal(typeof value, 'string', `${what} is not a string: ${JSON.stringify(value)}`);
  assert.match(value as string, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/, what);
}

/** Every field the contract lists for a Job, with its type. */
export function assertJobShape(job: Record<string, Json>): void {
  for (const field of [
    'id',
    'project_id',
    'number',
    'state',
    'trigger',
    'ref',
    'sha',
    'trusted',
    'rerun_of',
    'error',
    'errors',
    'created_at',
    'started_at',
    'finished_at',
  ]) {
    assert.ok(field in job, `Job has no ${field}: ${JSON.stringify(job)}`);
  }
  assert.equal(typeof job.number, 'number');
  assert.ok(
    ['pending', 'blocked', 'running', 'success', 'failed', 'cancelled'].includes(job.state),
  );
  assert.ok(['push', 'tag', 'pull_request', 'manual', 'rerun'].includes(job.trigger));
  assert.equal(typeof job.trusted, 'boolean');
  assertTime(job.created_at, 'created_at');
  if (job.started_at !== null) assertTime(job.started_at, 'started_at');
  if (job.finished_at !== null) assertTime(job.finished_at, 'finished_at');
}

/** Every field the contract lists for a TaskView. */
export function assertTaskViewShape(task: Record<string, Json>): void {
  for (const field of [
    'id',
    'name',
    'base_name',
    'matrix',
    'state',
    'needs',
    'attempt',
    'max_attempts',
    'allow_failure',
    'exit_code',
    'error',
    'outputs',
    'started_at',
    'finished_at',
  ]) {
    assert.ok(field in task, `TaskView has no ${field}: ${JSON.stringify(task)}`);
  }
  assert.ok(
    ['waiting', 'queued', 'running', 'success', 'failed', 'skipped', 'cancelled'].includes(
      task.state,
    ),
  );
  assert.equal(typeof task.attempt, 'number');
  assert.equal(typeof task.max_attempts, 'number');
  assert.ok(Array.isArray(task.needs));
}

/** Every field the contract lists for a Task handed to a runner. */
export function assertTaskShape(task: Record<string, Json>): void {
  for (const field of [
    'id',
    'job_id',
    'name',
    'lease_id',
    'attempt',
    'max_attempts',
    'lease_expires_at',
    'image',
    'script',
    'env',
    'secrets',
    'matrix',
    'needs_outputs',
    'timeout_s',
    'repo',
  ]) {
    assert.ok(field in task, `Task has no ${field}: ${JSON.stringify(task)}`);
  }
  assert.equal(typeof task.attempt, 'number');
  assert.equal(typeof task.max_attempts, 'number');
  assert.equal(typeof task.timeout_s, 'number');
  assertTime(task.lease_expires_at, 'lease_expires_at');
  assert.ok(task.image === null || typeof task.image === 'string');
  assert.ok(Array.isArray(task.script));
  for (const key of ['url', 'sha', 'ref']) assert.equal(typeof task.repo[key], 'string');
}
