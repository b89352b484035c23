// The calls the end-to-end tests make: signed webhook deliveries, the admin
// API, the runner protocol, each asserting what it must answer.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { signBody } from '../../lib/forge/webhook.ts';
import { githubPush } from '../forge/fixtures/github.ts';
import { type FakeForge, startFakeForge } from '../helpers/fake-forge.ts';
import { type TestStack, testStack } from '../helpers/stack.ts';
import { type Forge, pipeline, sha } from './payloads.ts';

/** A JSON value from the API, read field by field in assertions. */
// biome-ignore lint/suspicious/noExplicitAny: answers are checked by assertions, not by types.
export type Json = any;
export type Reply = Awaited<ReturnType<TestStack['call']>>;

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

/** A signed GitHub push of `commit` to `branch`, asserting the 202; answers the job id (the job may still be pending). */
export async function pushToBranch(
  stack: TestStack,
  project: { repo: string; secret: string },
  commit: string,
  branch: string,
): Promise<string> {
  const hook = await sendWebhook(
    stack,
    'github',
    'push',
    githubPush(project.repo, commit, { ref: `refs/heads/${branch}` }),
    { secret: project.secret },
  );
  assert.equal(hook.status, 202, hook.text);
  return hook.body.job_id;
}

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

/** A trusted and an untrusted worker, both registered with `label`; answers their tokens. */
export async function twoPools(
  stack: TestStack,
  label: string,
): Promise<{ trusted: string; untrusted: string }> {
  const trusted = await createWorker(stack, [label], `${label}-trusted`);
  const untrusted = await createWorker(stack, [label], `${label}-untrusted`, { untrusted: true });
  assert.equal(trusted.worker.untrusted, false);
  assert.equal(untrusted.worker.untrusted, true);
  return { trusted: trusted.token, untrusted: untrusted.token };
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
