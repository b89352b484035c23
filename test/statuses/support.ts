// Shared pieces of the commit-status tests: a project on the fake forge with a
// runner of its own, pushes, a simulated runner, and reads of the outbox.
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { runSweep } from '../../lib/app/sweep.ts';
import {
  claim,
  complete,
  createProject,
  createWorker,
  type Json,
  sendWebhook,
} from '../e2e/calls.ts';
import { type Forge, sha } from '../e2e/payloads.ts';
import { giteaPush } from '../forge/fixtures/gitea.ts';
import { githubPush } from '../forge/fixtures/github.ts';
import {
  type DownOptions,
  type FakeStatusForge,
  type Outage,
  type StatusPost,
  startFakeForge,
} from '../helpers/fake-forge.ts';
import { type TestStack, testStack } from '../helpers/stack.ts';

/** A pipeline of one task, `check`. */
export const ONE_TASK = '  check:\n    script: [make check]\n';

/** A pipeline of two tasks: `build`, then `test`, which needs it. */
export const TWO_TASKS = `  build:
    script: [make]
  test:
    needs: [build]
    script: [make test]
`;

/**
 * A fake status forge and a stack for the test file `file`, with GitHub's API
 * pointed at the fake (so a stray GitHub post shows up there too) and `env` on top.
 */
export async function statusStack(
  file: string,
  env: Record<string, string> = {},
): Promise<{ fake: FakeStatusForge; stack: TestStack }> {
  const fake = await startFakeForge({ statuses: true });
  const stack = await testStack(file, { CONDUCTOR_GITHUB_API_URL: fake.url, ...env });
  return { fake, stack };
}

export interface StatusProject {
  id: string;
  forge: Forge;
  /** `owner/name` */
  repo: string;
  /** The webhook secret. */
  secret: string;
  /** The forge token, or null for a project without one. */
  forgeToken: string | null;
  /** The label every task of this project carries, and the runner's token that has it. */
  label: string;
  runner: string;
  view: Record<string, Json>;
}

/**
 * A project on the fake forge (GitHub through CONDUCTOR_GITHUB_API_URL, Gitea
 * through forge_url) with a forge token unless `forgeToken: null`, and a runner
 * registered with a label of its own so tests sharing a database never take
 * each other's tasks.
 */
export async function makeProject(
  stack: TestStack,
  fake: FakeStatusForge,
  forge: Forge,
  id: string,
  opts: { forgeToken?: string | null; repoUrl?: string; forgeUrl?: string } = {},
): Promise<StatusProject> {
  const repo = `${forge === 'github' ? 'octo-org' : 'harbor'}/${id}`;
  const forgeToken = opts.forgeToken === undefined ? `${forge}-token-${id}` : opts.forgeToken;
  const { project, secret } = await createProject(stack, {
    id,
    name: id,
    forge,
    repo,
    repo_url: opts.repoUrl ?? `https://${forge}.example/${repo}.git`,
    ...(forgeToken === null ? {} : { forge_token: forgeToken }),
    ...(forge === 'gitea' ? { forge_url: opts.forgeUrl ?? fake.url } : {}),
  });
  const { token } = await createWorker(stack, [id], `runner-${id}`);
  return { id, forge, repo, secret, forgeToken, label: id, runner: token, view: project };
}

/**
 * A project `id` (see makeProject) and the commit `sha(id)`, whose `.conductor.yml`
 * on the fake has `tasks` and, if given, the pipeline name `name`.
 */
export async function projectOn(
  stack: TestStack,
  fake: FakeStatusForge,
  forge: Forge,
  id: string,
  tasks: string,
  name?: string,
): Promise<{ p: StatusProject; commit: string }> {
  const p = await makeProject(stack, fake, forge, id);
  const commit = sha(id);
  fake.setFile(p.repo, commit, pipelineFile(p.label, tasks, name));
  return { p, commit };
}

/** A `.conductor.yml` whose tasks all carry `label`; `name` sets the pipeline's `name:`. */
export function pipelineFile(label: string, tasks: string, name?: string): string {
  return `version: 1
${name ? `name: ${name}\n` : ''}defaults:
  labels: [${label}]
tasks:
${tasks}`;
}

/** Sends a signed push of `commit` to `ref`; answers the job id. */
export async function push(
  stack: TestStack,
  p: StatusProject,
  commit: string,
  ref = 'refs/heads/main',
): Promise<string> {
  const payload =
    p.forge === 'github' ? githubPush(p.repo, commit, { ref }) : giteaPush(p.repo, commit, { ref });
  const hook = await sendWebhook(stack, p.forge, 'push', payload, { secret: p.secret });
  assert.equal(hook.status, 202, hook.text);
  return hook.body.job_id;
}

/**
 * Pushes `commit` and waits for its first status post (the start, or an error)
 * and for its deliverer to finish; answers the job id and the posts so far.
 */
export async function pushSettled(
  stack: TestStack,
  fake: FakeStatusForge,
  p: StatusProject,
  commit: string,
  ref?: string,
): Promise<{ jobId: string; posts: StatusPost[] }> {
  const jobId = await push(stack, p, commit, ref);
  const posts = await statusesSettled(stack, fake, jobId, commit, 1);
  return { jobId, posts };
}

/**
 * Runs `work` with the fake down (status posts answered with `outage`, see
 * FakeStatusForge.down) and brings it back up afterwards, whatever happens.
 */
export async function whileDown<T>(
  fake: FakeStatusForge,
  outage: Outage,
  work: () => Promise<T>,
  opts?: DownOptions,
): Promise<T> {
  fake.down(outage, opts);
  try {
    return await work();
  } finally {
    fake.up();
  }
}

/**
 * Plays the project's runner: claims every task there is and completes it with
 * the outcome `outcomes` names for it (default success), until none is left.
 * Answers the job states the completions reported, in order.
 */
export async function runTasks(
  stack: TestStack,
  p: StatusProject,
  outcomes: Record<string, 'success' | 'failed'> = {},
): Promise<(string | null)[]> {
  const reported: (string | null)[] = [];
  for (;;) {
    const res = await claim(stack, p.runner);
    if (res.status === 204) return reported;
    assert.equal(res.status, 200, res.text);
    const task = res.body.task;
    const outcome = outcomes[task.name] ?? 'success';
    const done = await complete(stack, p.runner, task.id, {
      lease_id: task.lease_id,
      outcome,
      exit_code: outcome === 'success' ? 0 : 1,
    });
    assert.equal(done.status, 200, done.text);
    reported.push(done.body.job_state);
  }
}

export interface OutboxRow {
  id: number;
  state: string;
  description: string;
  attempts: number;
  result: string | null;
  last_error: string | null;
  claimed: boolean;
  due: boolean;
  next_attempt_at: Date;
}

/** The database's clock, read before and after `action` runs: when whatever it wrote was written. */
export async function during<T>(
  stack: TestStack,
  action: () => Promise<T>,
): Promise<{ value: T; from: Date; to: Date }> {
  const clock = async () =>
    (await stack.context.pool.query<{ t: Date }>('select clock_timestamp() as t')).rows[0]!.t;
  const from = await clock();
  const value = await action();
  return { value, from, to: await clock() };
}

/**
 * Asserts that `row` waits `seconds` from a moment within `window`: its next
 * attempt was set that far ahead by what ran in it, however slowly the test
 * got there (a wait measured from now would shrink on a loaded machine).
 */
export function assertWaits(
  row: OutboxRow,
  seconds: number,
  window: { from: Date; to: Date },
  what = 'the backoff',
): void {
  const set = row.next_attempt_at.getTime() - seconds * 1000;
  // Dates carry milliseconds, the server microseconds: 1 ms either way.
  assert.ok(
    set >= window.from.getTime() - 1 && set <= window.to.getTime() + 1,
    `${what}: next attempt at ${row.next_attempt_at.toISOString()}, not ${seconds} s after a moment in ${window.from.toISOString()} to ${window.to.toISOString()}`,
  );
}

/** The job's outbox rows, oldest first. */
export async function outbox(stack: TestStack, jobId: string): Promise<OutboxRow[]> {
  const { rows } = await stack.context.pool.query<OutboxRow>(
    `select id::int as id, state, description, attempts, result, last_error,
            coalesce(claimed_until > now(), false) as claimed,
            next_attempt_at <= now() as due,
            next_attempt_at
       from status_outbox where job_id = $1 order by id`,
    [jobId],
  );
  return rows;
}

/** Polls until `check` holds (30 s at most: a deadline for a loaded machine, not a speed claim). */
export async function waitUntil(what: string, check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (!(await check())) {
    if (Date.now() > deadline) assert.fail(`timed out waiting until ${what}`);
    await sleep(10);
  }
}

/**
 * Waits until no deliverer holds a row of the job: what a post-commit delivery
 * started (after an in-process compile, say) has then finished writing its outcome.
 */
export async function outboxIdle(stack: TestStack, jobId: string): Promise<OutboxRow[]> {
  let rows: OutboxRow[] = [];
  await waitUntil(`no outbox row of job ${jobId} is claimed`, async () => {
    rows = await outbox(stack, jobId);
    return rows.every((r) => !r.claimed);
  });
  return rows;
}

/** Waits for `count` status posts on `commit` and for their deliverers to finish. */
export async function statusesSettled(
  stack: TestStack,
  fake: FakeStatusForge,
  jobId: string,
  commit: string,
  count: number,
): Promise<StatusPost[]> {
  await fake.waitForStatuses(commit, count);
  await outboxIdle(stack, jobId);
  return fake.statusesFor(commit);
}

/** Makes the job's open rows due now, as if their backoff (or hold-back) had passed. */
export async function makeDue(stack: TestStack, jobId: string): Promise<void> {
  await stack.context.pool.query(
    `update status_outbox set next_attempt_at = now() - interval '1 second'
      where job_id = $1 and result is null`,
    [jobId],
  );
}

/** Makes the job's open rows due now and runs a sweep; answers its summary. */
export async function sweepDue(stack: TestStack, jobId: string) {
  await makeDue(stack, jobId);
  return runSweep(stack.context);
}

/** Makes every open row of every job due now and runs a sweep, as sweeps do once backoffs have passed. */
export async function sweepAllDue(stack: TestStack) {
  await stack.context.pool.query(
    `update status_outbox set next_attempt_at = now() - interval '1 second' where result is null`,
  );
  return runSweep(stack.context);
}

/** Waits until the job's compile has recorded an error (the forge would not give the pipeline file). */
export async function compileFailed(stack: TestStack, jobId: string): Promise<void> {
  await waitUntil(`the compile of job ${jobId} noted the forge error`, async () => {
    const { rows } = await stack.context.pool.query<{ error: string | null }>(
      'select error from jobs where id = $1',
      [jobId],
    );
    return rows[0]?.error != null;
  });
}

/**
 * Calls the API as the admin and checks the answer's status; answers the
 * response. `body` is sent as JSON when given.
 */
export async function adminCall(
  stack: TestStack,
  method: string,
  path: string,
  status: number,
  body?: unknown,
): Promise<Awaited<ReturnType<TestStack['call']>>> {
  const res = await stack.call(method, path, { token: stack.adminToken, body });
  assert.equal(res.status, status, res.text);
  return res;
}

/** `state: description` of each post, for comparing whole sequences. */
export function seen(posts: StatusPost[]): string[] {
  return posts.map((p) => `${p.body?.state}: ${p.body?.description}`);
}

/** `state: description` of each post, with what the fake answered. */
export function seenAnswered(posts: StatusPost[]): string[] {
  return posts.map((p) => `${p.body?.state}: ${p.body?.description} -> ${p.answered}`);
}

/**
 * Checks a post's path, auth header and body for the project's forge: GitHub
 * `/repos/…/statuses/{sha}` with a Bearer token, Gitea `/api/v1/repos/…` with
 * `token`; the body has exactly state, context, description and, only with a
 * public URL, target_url.
 */
export function assertPost(
  post: StatusPost,
  p: StatusProject,
  commit: string,
  expected: { state: string; description: string; context: string; targetUrl?: string },
): void {
  if (p.forge === 'github') {
    assert.equal(post.api, 'github');
    assert.equal(post.path, `/repos/${p.repo}/statuses/${commit}`);
    assert.equal(post.authorization, `Bearer ${p.forgeToken}`);
    assert.equal(post.headers.accept, 'application/vnd.github+json');
  } else {
    assert.equal(post.api, 'gitea');
    assert.equal(post.path, `/api/v1/repos/${p.repo}/statuses/${commit}`);
    assert.equal(post.authorization, `token ${p.forgeToken}`);
  }
  assert.match(String(post.headers['content-type']), /^application\/json/);
  assert.deepEqual(post.body, {
    state: expected.state,
    context: expected.context,
    description: expected.description,
    ...(expected.targetUrl ? { target_url: expected.targetUrl } : {}),
  });
}
