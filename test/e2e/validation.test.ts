import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';
import { giteaPush } from '../forge/fixtures/gitea.ts';
import { githubPullRequest, githubPush } from '../forge/fixtures/github.ts';
import { assertBadRequest } from './assertions.ts';
import {
  claimTask,
  countRows,
  createWorker,
  type Reply,
  sendWebhook,
  startE2E,
  waitForJob,
} from './calls.ts';
import { pipeline, sha } from './payloads.ts';

const REPO = 'acme/validation';
const {
  fake,
  stack,
  projects: { project },
} = await startE2E(import.meta.filename, {
  projects: { project: { forge: 'github', id: 'validation', repo: REPO } },
});
const runner = await createWorker(stack, ['validation']);
const commit = sha('validation');
fake.setFile(REPO, commit, pipeline('validation', '  a:\n    script: [make]\n'));
const hook = await sendWebhook(stack, 'github', 'push', githubPush(REPO, commit), {
  secret: project.secret,
});
const job = await waitForJob(stack, hook.body.job_id);
const task = await claimTask(stack, runner.token);
const LEASE = task.lease_id as string;

type Case = [what: string, body: unknown, field?: string];

/** Sends each malformed body (an object is sent as JSON, a string as raw bytes) and expects a 400 naming the field. */
async function expect400(send: (body: unknown) => Promise<Reply>, cases: Case[]): Promise<void> {
  for (const [what, body, field] of cases) {
    const res = await send(body);
    assert.notEqual(res.status, 500, `${what}: ${res.text}`);
    try {
      assertBadRequest(res, field);
    } catch (err) {
      throw new Error(`${what}: ${(err as Error).message}`);
    }
  }
}

const asBody = (body: unknown) => (typeof body === 'string' ? { raw: body } : { body });
const admin = (method: string, path: string) => (body: unknown) =>
  stack.call(method, path, { token: stack.adminToken, ...asBody(body) });
const worker = (path: string) => (body: unknown) =>
  stack.call('POST', path, { token: runner.token, ...asBody(body) });

// Bodies that are not a JSON object at all.
const NOT_OBJECTS: Case[] = [
  ['invalid JSON', '{"lease_id": '],
  ['a JSON list', '[]'],
  ['JSON null', 'null'],
  ['a JSON string', '"hello"'],
  ['a JSON number', '42'],
];

test('a malformed claim is a 400 naming the field', async () => {
  await expect400(worker('/v1/runner/claim'), [
    ...NOT_OBJECTS,
    ['labels not a list', { labels: 'validation' }, 'labels'],
    ['a label not a string', { labels: [7] }, 'labels'],
    ['an empty label', { labels: [''] }, 'labels'],
    ['an unknown field', { labels: [], max: 3 }, 'max'],
    ['a label the worker was not registered with', { labels: ['gpu'] }, 'labels'],
  ]);
});

test('a malformed heartbeat is a 400 naming the field', async () => {
  await expect400(worker(`/v1/runner/tasks/${task.id}/heartbeat`), [
    ...NOT_OBJECTS,
    ['no body', '', 'lease_id'],
    ['lease_id missing', {}, 'lease_id'],
    ['lease_id not a UUID', { lease_id: 'lease-1' }, 'lease_id'],
    ['lease_id a number', { lease_id: 12 }, 'lease_id'],
    ['an unknown field', { lease_id: LEASE, progress: 50 }, 'progress'],
  ]);
});

test('a malformed log chunk is a 400 naming the field', async () => {
  await expect400(worker(`/v1/runner/tasks/${task.id}/logs`), [
    ...NOT_OBJECTS,
    ['lease_id missing', { offset: 0, data: 'x' }, 'lease_id'],
    ['offset missing', { lease_id: LEASE, data: 'x' }, 'offset'],
    ['offset negative', { lease_id: LEASE, offset: -1, data: 'x' }, 'offset'],
    ['offset a string', { lease_id: LEASE, offset: '0', data: 'x' }, 'offset'],
    ['offset a fraction', { lease_id: LEASE, offset: 1.5, data: 'x' }, 'offset'],
    ['data missing', { lease_id: LEASE, offset: 0 }, 'data'],
    ['data not a string', { lease_id: LEASE, offset: 0, data: ['x'] }, 'data'],
    ['an unknown field', { lease_id: LEASE, offset: 0, data: 'x', stream: 'stderr' }, 'stream'],
  ]);
});

test('a malformed completion is a 400 naming the field', async () => {
  await expect400(worker(`/v1/runner/tasks/${task.id}/complete`), [
    ...NOT_OBJECTS,
    ['outcome missing', { lease_id: LEASE }, 'outcome'],
    ['outcome unknown', { lease_id: LEASE, outcome: 'done' }, 'outcome'],
    ['lease_id missing', { outcome: 'success' }, 'lease_id'],
    ['exit_code a string', { lease_id: LEASE, outcome: 'failed', exit_code: '1' }, 'exit_code'],
    ['exit_code a fraction', { lease_id: LEASE, outcome: 'failed', exit_code: 1.5 }, 'exit_code'],
    ['outputs a list', { lease_id: LEASE, outcome: 'success', outputs: ['a'] }, 'outputs'],
    ['an output not a string', { lease_id: LEASE, outcome: 'success', outputs: { v: 1 } }, 'v'],
    [
      'an output name with a dash',
      { lease_id: LEASE, outcome: 'success', outputs: { 'bad-name': 'x' } },
      'outputs',
    ],
    ['transient a string', { lease_id: LEASE, outcome: 'failed', transient: 'yes' }, 'transient'],
    ['error a number', { lease_id: LEASE, outcome: 'failed', error: 3 }, 'error'],
    ['an unknown field', { lease_id: LEASE, outcome: 'success', duration: 3 }, 'duration'],
  ]);
  // None of it touched the task: it still runs under its lease.
  const beat = await stack.call('POST', `/v1/runner/tasks/${task.id}/heartbeat`, {
    token: runner.token,
    body: { lease_id: LEASE },
  });
  assert.equal(beat.status, 200, beat.text);
});

test('a malformed project is a 400 naming the field, and creates nothing', async () => {
  const good = {
    id: 'fine',
    name: 'fine',
    forge: 'github',
    repo: 'acme/fine',
    repo_url: 'https://github.com/acme/fine.git',
  };
  const before = await countRows(stack, 'projects');
  await expect400(admin('POST', '/v1/projects'), [
    ...NOT_OBJECTS,
    ['no body', '', 'id'],
    ['id missing', { ...good, id: undefined }, 'id'],
    ['id with capitals', { ...good, id: 'Fine' }, 'id'],
    ['id starting with a dash', { ...good, id: '-fine' }, 'id'],
    ['id too long', { ...good, id: 'a'.repeat(64) }, 'id'],
    ['id a number', { ...good, id: 7 }, 'id'],
    ['name missing', { ...good, name: undefined }, 'name'],
    ['forge unknown', { ...good, forge: 'bitbucket' }, 'forge'],
    ['repo without owner', { ...good, repo: 'fine' }, 'repo'],
    ['repo with three parts', { ...good, repo: 'a/b/c' }, 'repo'],
    ['repo_url not a URL', { ...good, repo_url: 'github.com/acme/fine' }, 'repo_url'],
    ['forge_url not http', { ...good, forge_url: 'ftp://gitea.example' }, 'forge_url'],
    ['gitea without forge_url', { ...good, forge: 'gitea' }, 'forge_url'],
    ['forge_token empty', { ...good, forge_token: '' }, 'forge_token'],
    ['cancel_superseded a string', { ...good, cancel_superseded: 'yes' }, 'cancel_superseded'],
    ['an unknown field', { ...good, webhook_secret: 'mine' }, 'webhook_secret'],
  ]);
  assert.equal(await countRows(stack, 'projects'), before);
});

test('a malformed project change is a 400 naming the field, and changes nothing', async () => {
  await expect400(admin('PATCH', `/v1/projects/${project.project.id}`), [
    ...NOT_OBJECTS,
    ['enabled a string', { enabled: 'no' }, 'enabled'],
    ['name empty', { name: '' }, 'name'],
    ['name a number', { name: 3 }, 'name'],
    ['repo_url relative', { repo_url: 'acme/validation' }, 'repo_url'],
    ['forge_url not a URL', { forge_url: 'gitea' }, 'forge_url'],
    ['repo is not changeable', { repo: 'acme/other' }, 'repo'],
    ['forge is not changeable', { forge: 'gitea' }, 'forge'],
    ['id is not changeable', { id: 'other' }, 'id'],
  ]);
  const res = await stack.call('GET', `/v1/projects/${project.project.id}`, {
    token: stack.adminToken,
  });
  assert.equal(res.body.project.enabled, true);
  assert.equal(res.body.project.name, 'validation');
});

test('a malformed secret is a 400 naming the field', async () => {
  const path = `/v1/projects/${project.project.id}/secrets`;
  await expect400(admin('PUT', `${path}/API_KEY`), [
    ...NOT_OBJECTS,
    ['value missing', {}, 'value'],
    ['value a number', { value: 5 }, 'value'],
    ['value null', { value: null }, 'value'],
    ['an unknown field', { value: 'v', note: 'n' }, 'note'],
  ]);
  await expect400(admin('PUT', `${path}/bad-name`), [
    ['a name with a dash', { value: 'v' }, 'name'],
  ]);
  await expect400(admin('PUT', `${path}/1ST`), [
    ['a name starting with a digit', { value: 'v' }, 'name'],
  ]);
  assert.equal(await countRows(stack, 'project_secrets'), 0);
});

test('a malformed manual trigger is a 400 naming the field, and creates no job', async () => {
  const jobs = await countRows(stack, 'jobs');
  await expect400(admin('POST', `/v1/projects/${project.project.id}/jobs`), [
    ...NOT_OBJECTS,
    ['no body', '', 'ref'],
    // Without a sha the ref's head is asked of the forge, which has no such branch.
    ['sha missing, and the ref has no head', { ref: 'main' }, 'ref'],
    ['ref missing', { sha: commit }, 'ref'],
    ['sha too short', { ref: 'main', sha: commit.slice(0, 12) }, 'sha'],
    ['sha not hex', { ref: 'main', sha: 'z'.repeat(40) }, 'sha'],
    ['ref with a space', { ref: 'my branch', sha: commit }, 'ref'],
    ['ref empty', { ref: '', sha: commit }, 'ref'],
    ['ref a number', { ref: 1, sha: commit }, 'ref'],
    ['an unknown field', { ref: 'main', sha: commit, trusted: false }, 'trusted'],
  ]);
  assert.equal(await countRows(stack, 'jobs'), jobs);
});

test('a malformed rerun is a 400 naming the field', async () => {
  await expect400(admin('POST', `/v1/jobs/${job.job.id}/rerun`), [
    ...NOT_OBJECTS,
    ['failed_only a string', { failed_only: 'true' }, 'failed_only'],
    ['failed_only a number', { failed_only: 1 }, 'failed_only'],
    ['an unknown field', { failed_only: true, tasks: ['a'] }, 'tasks'],
  ]);
});

test('a malformed worker is a 400 naming the field, and registers nothing', async () => {
  const workers = await countRows(stack, 'workers');
  await expect400(admin('POST', '/v1/workers'), [
    ...NOT_OBJECTS,
    ['name missing', { labels: [] }, 'name'],
    ['name empty', { name: ' ', labels: [] }, 'name'],
    ['labels a string', { name: 'w', labels: 'linux' }, 'labels'],
    ['a label with a space', { name: 'w', labels: ['big box'] }, 'labels'],
    ['a label not a string', { name: 'w', labels: [1] }, 'labels'],
    ['an unknown field', { name: 'w', labels: [], token: 'mine' }, 'token'],
  ]);
  assert.equal(await countRows(stack, 'workers'), workers);
});

test('malformed query parameters are a 400 naming the parameter', async () => {
  const jobs = `/v1/projects/${project.project.id}/jobs`;
  for (const [query, field] of [
    ['limit=0', 'limit'],
    ['limit=101', 'limit'],
    ['limit=ten', 'limit'],
    ['limit=2.5', 'limit'],
    ['before=0', 'before'],
    ['before=x', 'before'],
  ] as const) {
    const res = await stack.call('GET', `${jobs}?${query}`, { token: stack.adminToken });
    assertBadRequest(res, field);
  }
  for (const [query, field] of [
    ['attempt=0', 'attempt'],
    ['attempt=one', 'attempt'],
    ['offset=-1', 'offset'],
  ] as const) {
    const res = await stack.call('GET', `/v1/tasks/${task.id}/log?${query}`, {
      token: stack.adminToken,
    });
    assertBadRequest(res, field);
  }
});

test('a malformed webhook is a 400 naming the field, never a 500, and writes nothing', async () => {
  const jobs = await countRows(stack, 'jobs');
  const push = githubPush(REPO, sha('bad-webhook'));
  const pr = githubPullRequest('opened', { repo: REPO, number: 5, headSha: sha('bad-pr') });
  const send = (forge: 'github' | 'gitea', event: string) => (body: unknown) =>
    sendWebhook(stack, forge, event, body, {
      secret: project.secret,
      ...(typeof body === 'string' ? { raw: body } : {}),
    });
  await expect400(send('github', 'push'), [
    ...NOT_OBJECTS,
    ['an empty body', ''],
    ['after missing', { ...push, after: undefined }, 'after'],
    ['after not a sha', { ...push, after: 'main' }, 'after'],
    ['after a number', { ...push, after: 42 }, 'after'],
    ['after in upper case', { ...push, after: push.after.toUpperCase() }, 'after'],
    ['ref missing', { ...push, ref: undefined }, 'ref'],
    ['ref a list', { ...push, ref: ['refs/heads/main'] }, 'ref'],
    ['repository missing', { ...push, repository: undefined }, 'repository'],
    ['repository.full_name missing', { ...push, repository: { id: 1 } }, 'repository.full_name'],
    ['repository a string', { ...push, repository: REPO }, 'repository'],
  ]);
  await expect400(send('github', 'pull_request'), [
    ['action missing', { ...pr, action: undefined }, 'action'],
    [
      'head.sha missing',
      {
        ...pr,
        pull_request: { ...pr.pull_request, head: { ...pr.pull_request.head, sha: undefined } },
      },
      'pull_request.head.sha',
    ],
    [
      'base.ref missing',
      {
        ...pr,
        pull_request: { ...pr.pull_request, base: { ...pr.pull_request.base, ref: undefined } },
      },
      'pull_request.base.ref',
    ],
    ['pull_request missing', { ...pr, pull_request: undefined }, 'pull_request'],
    [
      'number missing everywhere',
      { ...pr, number: undefined, pull_request: { ...pr.pull_request, number: undefined } },
      'number',
    ],
    ['number a string', { ...pr, number: '5' }, 'number'],
  ]);
  await expect400(send('gitea', 'push'), [
    ...NOT_OBJECTS,
    ['after missing', { ...giteaPush('acme/x', sha('g')), after: undefined }, 'after'],
  ]);
  assert.equal(await countRows(stack, 'jobs'), jobs);

  // Fields nobody reads are ignored: an extra one does not stop a build.
  const extra = await sendWebhook(
    stack,
    'github',
    'push',
    { ...githubPush(REPO, commit, { ref: 'refs/heads/extra' }), conductor_extra: { a: 1 } },
    { secret: project.secret },
  );
  assert.equal(extra.status, 202, extra.text);
});

test('a path id that is not a UUID is a 404 on admin routes, not a 400 or 500', async () => {
  for (const [method, path] of [
    ['GET', '/v1/jobs/123'],
    ['POST', '/v1/jobs/123/cancel'],
    ['POST', '/v1/jobs/123/rerun'],
    ['GET', '/v1/tasks/123/log'],
    ['DELETE', '/v1/workers/123'],
    ['GET', `/v1/jobs/${randomUUID()}`],
  ] as const) {
    const res = await stack.call(method, path, {
      token: stack.adminToken,
      ...(method === 'POST' ? { body: {} } : {}),
    });
    assert.equal(res.status, 404, `${method} ${path}: ${res.text}`);
    assert.equal(res.body.error.code, 'not_found');
  }
});

/** Runs each request and collects those that did not answer one of the expected statuses. */
async function misanswered(
  cases: [what: string, send: () => Promise<Reply>, expected: number[]][],
): Promise<string[]> {
  const wrong: string[] = [];
  for (const [what, send, expected] of cases) {
    const res = await send();
    if (!expected.includes(res.status)) wrong.push(`${what}: ${res.status} ${res.text}`);
  }
  return wrong;
}

test('a NUL character in a path id or a text field answers 400 or 404, never 500', async () => {
  const A = { token: stack.adminToken };
  const nul = 'a\u0000b';
  const wrong = await misanswered([
    ['GET /v1/projects/%00', () => stack.call('GET', '/v1/projects/%00', A), [404]],
    [
      'PATCH /v1/projects/%00',
      () => stack.call('PATCH', '/v1/projects/%00', { ...A, body: {} }),
      [404],
    ],
    ['DELETE /v1/projects/%00', () => stack.call('DELETE', '/v1/projects/%00', A), [404]],
    ['GET /v1/projects/%00/secrets', () => stack.call('GET', '/v1/projects/%00/secrets', A), [404]],
    [
      'DELETE a secret named %00',
      () => stack.call('DELETE', '/v1/projects/validation/secrets/%00', A),
      [400, 404],
    ],
    [
      'POST /v1/projects with a NUL in name',
      () =>
        stack.call('POST', '/v1/projects', {
          ...A,
          body: {
            id: 'nul',
            name: nul,
            forge: 'github',
            repo: 'acme/nul',
            repo_url: 'https://github.com/acme/nul.git',
          },
        }),
      [400],
    ],
    [
      'POST /v1/workers with a NUL in name',
      () => stack.call('POST', '/v1/workers', { ...A, body: { name: nul, labels: [] } }),
      [400],
    ],
    [
      'POST /v1/projects/{id}/jobs with a NUL in ref',
      () =>
        stack.call('POST', '/v1/projects/validation/jobs', {
          ...A,
          body: { ref: nul, sha: commit },
        }),
      [400],
    ],
    [
      'a push webhook with a NUL in repository.full_name',
      () =>
        sendWebhook(stack, 'github', 'push', githubPush(`acme/vali${nul}dation`, commit), {
          secret: project.secret,
        }),
      [400, 404],
    ],
    [
      'a push webhook with a NUL in ref',
      () =>
        sendWebhook(
          stack,
          'github',
          'push',
          githubPush(REPO, commit, { ref: `refs/heads/${nul}` }),
          {
            secret: project.secret,
          },
        ),
      [400],
    ],
    [
      'a completion with a NUL in error',
      () =>
        stack.call('POST', `/v1/runner/tasks/${task.id}/complete`, {
          token: runner.token,
          body: { lease_id: LEASE, outcome: 'failed', error: nul },
        }),
      [400],
    ],
  ]);
  assert.deepEqual(wrong, []);
});

test('numbers past a 32-bit integer in a query or a webhook answer 400, never 500', async () => {
  const A = { token: stack.adminToken };
  const wrong = await misanswered([
    [
      'GET /v1/projects/{id}/jobs?before=99999999999',
      () => stack.call('GET', '/v1/projects/validation/jobs?before=99999999999', A),
      [200, 400],
    ],
    [
      'GET /v1/tasks/{id}/log?attempt=99999999999',
      () => stack.call('GET', `/v1/tasks/${task.id}/log?attempt=99999999999`, A),
      [400, 404],
    ],
    [
      'a pull_request webhook numbered 10^12',
      () =>
        sendWebhook(
          stack,
          'github',
          'pull_request',
          githubPullRequest('opened', { repo: REPO, number: 1e12, headSha: commit }),
          { secret: project.secret },
        ),
      [400],
    ],
  ]);
  assert.deepEqual(wrong, []);
});
