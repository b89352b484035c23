import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';
import { signBody } from '../../lib/forge/webhook.ts';
import { giteaPush } from '../forge/fixtures/gitea.ts';
import { githubPush } from '../forge/fixtures/github.ts';
import { assertBadRequest, assertError, assertUnauthorized } from './assertions.ts';
import {
  claimTask,
  countRows,
  createWorker,
  deliverRunning,
  type Json,
  sendWebhook,
  startE2E,
} from './calls.ts';
import { pipeline, sha } from './payloads.ts';

const GH_REPO = 'acme/auth';
const GT_REPO = 'acme/auth-gitea';
const {
  fake,
  stack,
  projects: { gh, gt },
  addProject,
} = await startE2E(import.meta.filename, {
  projects: {
    gh: { forge: 'github', id: 'auth-gh', name: 'auth', repo: GH_REPO },
    gt: { forge: 'gitea', id: 'auth-gitea', name: 'auth gitea', repo: GT_REPO },
  },
});
const worker = await createWorker(stack, ['auth']);

const ADMIN_ROUTES: [string, string, unknown?][] = [
  ['GET', '/v1/projects'],
  [
    'POST',
    '/v1/projects',
    { id: 'x', name: 'x', forge: 'github', repo: 'a/b', repo_url: 'https://x' },
  ],
  ['GET', '/v1/projects/auth-gh'],
  ['PATCH', '/v1/projects/auth-gh', { enabled: false }],
  ['DELETE', '/v1/projects/auth-gh'],
  ['POST', '/v1/projects/auth-gh/webhook-secret'],
  ['GET', '/v1/projects/auth-gh/secrets'],
  ['PUT', '/v1/projects/auth-gh/secrets/TOKEN', { value: 'v' }],
  ['DELETE', '/v1/projects/auth-gh/secrets/TOKEN'],
  ['GET', '/v1/projects/auth-gh/jobs'],
  ['POST', '/v1/projects/auth-gh/jobs', { ref: 'main', sha: sha('x') }],
  ['GET', `/v1/jobs/${randomUUID()}`],
  ['POST', `/v1/jobs/${randomUUID()}/cancel`],
  ['POST', `/v1/jobs/${randomUUID()}/rerun`, {}],
  ['GET', `/v1/tasks/${randomUUID()}/log`],
  ['POST', '/v1/workers', { name: 'w', labels: [] }],
  ['GET', '/v1/workers'],
  ['DELETE', `/v1/workers/${randomUUID()}`],
];

const RUNNER_ROUTES: [string, unknown][] = [
  ['/v1/runner/claim', {}],
  [`/v1/runner/tasks/${randomUUID()}/heartbeat`, { lease_id: randomUUID() }],
  [`/v1/runner/tasks/${randomUUID()}/logs`, { lease_id: randomUUID(), offset: 0, data: 'x' }],
  [`/v1/runner/tasks/${randomUUID()}/complete`, { lease_id: randomUUID(), outcome: 'success' }],
];

test('every admin route answers 401 without a token, with a wrong one, and with a worker token', async () => {
  const projects = await countRows(stack, 'projects');
  for (const [method, path, body] of ADMIN_ROUTES) {
    for (const token of [
      undefined,
      'ca_not-the-admin-token',
      worker.token,
      `${stack.adminToken}x`,
    ]) {
      const res = await stack.call(method, path, { token, body });
      assert.equal(res.status, 401, `${method} ${path} with ${token ?? 'no token'}: ${res.text}`);
      assertUnauthorized(res);
    }
  }
  // A non-bearer scheme carrying the right token is not a bearer token.
  const basic = await stack.call('GET', '/v1/projects', {
    headers: {
      authorization: `Basic ${Buffer.from(`admin:${stack.adminToken}`).toString('base64')}`,
    },
  });
  assertUnauthorized(basic);
  assert.equal(await countRows(stack, 'projects'), projects, 'nothing was written');
  const still = await stack.call('GET', '/v1/projects/auth-gh', { token: stack.adminToken });
  assert.equal(still.status, 200);
  assert.equal(still.body.project.enabled, true);
});

test('the request id of a 401 is the one in the x-request-id header', async () => {
  const res = await stack.call('GET', '/v1/workers');
  assertUnauthorized(res);
  assert.equal(res.body.error.request_id, res.headers.get('x-request-id'));
});

test('every runner route answers 401 without a token, with a wrong one, and with the admin token', async () => {
  for (const [path, body] of RUNNER_ROUTES) {
    for (const token of [undefined, 'cw_not-a-worker-token', stack.adminToken]) {
      const res = await stack.call('POST', path, { token, body });
      assert.equal(res.status, 401, `POST ${path} with ${token ?? 'no token'}: ${res.text}`);
      assertUnauthorized(res);
    }
  }
});

test('authentication comes before validation: a bad body or id without a token is still a 401', async () => {
  assertUnauthorized(await stack.call('POST', '/v1/runner/claim', { raw: '{nope' }));
  assertUnauthorized(
    await stack.call('POST', '/v1/runner/tasks/not-a-uuid/heartbeat', { body: { lease_id: 1 } }),
  );
  // Claim and complete check the token in the statement that does the work,
  // so with a wrong token a bad request must still be a 401, not a 400.
  const wrong = 'cw_not-a-worker-token';
  assertUnauthorized(
    await stack.call('POST', '/v1/runner/claim', { token: wrong, body: { labels: 'x' } }),
  );
  assertUnauthorized(
    await stack.call('POST', '/v1/runner/tasks/not-a-uuid/complete', {
      token: wrong,
      body: { lease_id: 'nope', outcome: 'success' },
    }),
  );
  assertUnauthorized(await stack.call('POST', '/v1/projects', { raw: '{nope' }));
  assertUnauthorized(await stack.call('GET', '/v1/jobs/not-a-uuid'));
});

test('a revoked worker is refused at once on every runner route', async () => {
  const label = 'auth-revoke';
  const commit = sha('auth-revoke');
  fake.setFile(GH_REPO, commit, pipeline(label, '  one:\n    script: [make]\n'));
  await deliverRunning(
    stack,
    'github',
    'push',
    githubPush(GH_REPO, commit, { ref: 'refs/heads/revoke' }),
    gh.secret,
  );

  const doomed = await createWorker(stack, [label]);
  const task = await claimTask(stack, doomed.token);
  const gone = await stack.call('DELETE', `/v1/workers/${doomed.worker.id}`, {
    token: stack.adminToken,
  });
  assert.equal(gone.status, 204);
  assert.equal(gone.text, '');

  assertUnauthorized(
    await stack.call('POST', '/v1/runner/claim', { token: doomed.token, body: {} }),
  );
  assertUnauthorized(
    await stack.call('POST', `/v1/runner/tasks/${task.id}/heartbeat`, {
      token: doomed.token,
      body: { lease_id: task.lease_id },
    }),
  );
  assertUnauthorized(
    await stack.call('POST', `/v1/runner/tasks/${task.id}/logs`, {
      token: doomed.token,
      body: { lease_id: task.lease_id, offset: 0, data: 'x' },
    }),
  );
  assertUnauthorized(
    await stack.call('POST', `/v1/runner/tasks/${task.id}/complete`, {
      token: doomed.token,
      body: { lease_id: task.lease_id, outcome: 'success' },
    }),
  );
  const list = await stack.call('GET', '/v1/workers', { token: stack.adminToken });
  const row = list.body.workers.find((w: Json) => w.id === doomed.worker.id);
  assert.equal(row.revoked, true);
  // The revoked worker's token is not the admin's either.
  assertUnauthorized(await stack.call('GET', '/v1/workers', { token: doomed.token }));
});

for (const forge of ['github', 'gitea'] as const) {
  const repo = forge === 'github' ? GH_REPO : GT_REPO;
  const project = () => (forge === 'github' ? gh : gt);
  const push = (commit: string) =>
    forge === 'github' ? githubPush(repo, commit) : giteaPush(repo, commit);

  test(`a ${forge} webhook without a signature, or with a wrong one, is a 401 and writes nothing`, async () => {
    const jobs = await countRows(stack, 'jobs');
    const payload = push(sha(`${forge}-unsigned`));
    assertUnauthorized(await sendWebhook(stack, forge, 'push', payload));
    assertUnauthorized(await sendWebhook(stack, forge, 'push', payload, { signature: '' }));
    assertUnauthorized(
      await sendWebhook(stack, forge, 'push', payload, { secret: 'not-the-secret' }),
    );
    // The right HMAC in the other forge's format, and the right HMAC of another body.
    const bytes = Buffer.from(JSON.stringify(payload));
    const other = forge === 'github' ? 'gitea' : 'github';
    assertUnauthorized(
      await sendWebhook(stack, forge, 'push', payload, {
        signature: signBody(other, bytes, project().secret),
      }),
    );
    assertUnauthorized(
      await sendWebhook(stack, forge, 'push', payload, {
        signature: signBody(forge, Buffer.from(`${bytes} `), project().secret),
      }),
    );
    assert.equal(await countRows(stack, 'jobs'), jobs);
  });
}

test('webhook checks run in the contract order: size, JSON, headers and fields, project, signature', async () => {
  const jobs = await countRows(stack, 'jobs');
  const known = githubPush(GH_REPO, sha('order'));
  const unknown = githubPush('nobody/nothing', sha('order'));

  // 413 before anything reads the body: not JSON, no headers, no signature.
  const huge = Buffer.alloc(5 * 1024 * 1024 + 1, 'x');
  assertError(
    await sendWebhook(stack, 'github', 'push', null, { raw: huge, event: null, delivery: null }),
    413,
    'payload_too_large',
  );
  // Not JSON: 400, even for an unsigned body.
  assertBadRequest(
    await sendWebhook(stack, 'github', 'push', null, { raw: '{"ref": "refs/heads/' }),
  );
  assertBadRequest(await sendWebhook(stack, 'gitea', 'push', null, { raw: 'ref=main&after=1' }));
  // A missing event or delivery header: 400 naming it, before the project is looked up.
  assertBadRequest(
    await sendWebhook(stack, 'github', 'push', unknown, { event: null }),
    'X-GitHub-Event',
  );
  assertBadRequest(
    await sendWebhook(stack, 'github', 'push', unknown, { delivery: null }),
    'X-GitHub-Delivery',
  );
  assertBadRequest(
    await sendWebhook(stack, 'gitea', 'push', unknown, { event: null }),
    'X-Gitea-Event',
  );
  assertBadRequest(
    await sendWebhook(stack, 'gitea', 'push', unknown, { delivery: null }),
    'X-Gitea-Delivery',
  );
  // A field the event needs: 400 naming it, even for an unknown repository.
  const { after: _after, ...noAfter } = unknown;
  assertBadRequest(await sendWebhook(stack, 'github', 'push', noAfter), 'after');
  const { repository: _repository, ...noRepository } = known;
  assertBadRequest(
    await sendWebhook(stack, 'github', 'push', noRepository, { secret: gh.secret }),
    'repository',
  );
  // Unknown repository: 404 even with a bad signature or none.
  assertError(await sendWebhook(stack, 'github', 'push', unknown), 404, 'not_found');
  assertError(
    await sendWebhook(stack, 'github', 'push', unknown, { secret: 'wrong' }),
    404,
    'not_found',
  );
  // The repository exists on the other forge only: still 404 for this one.
  assertError(
    await sendWebhook(stack, 'gitea', 'push', giteaPush(GH_REPO, sha('order'))),
    404,
    'not_found',
  );
  // Known repository, bad signature: 401, even for an event that would be ignored.
  assertUnauthorized(await sendWebhook(stack, 'github', 'push', known, { secret: 'wrong' }));
  assertUnauthorized(
    await sendWebhook(stack, 'github', 'ping', {
      zen: 'Keep it simple.',
      repository: known.repository,
    }),
  );
  assert.equal(await countRows(stack, 'jobs'), jobs, 'nothing but a 202 writes a job');
});

test('ping, a deleted branch and other events answer 200 {ignored} and write nothing', async () => {
  const jobs = await countRows(stack, 'jobs');
  const ping = await sendWebhook(
    stack,
    'github',
    'ping',
    {
      zen: 'Design for failure.',
      hook_id: 481516234,
      hook: { type: 'Repository', id: 481516234, active: true, events: ['push', 'pull_request'] },
      repository: githubPush(GH_REPO, sha('p')).repository,
    },
    { secret: gh.secret },
  );
  assert.equal(ping.status, 200, ping.text);
  assert.equal(typeof ping.body.ignored, 'string');

  const ghDeleted = await sendWebhook(
    stack,
    'github',
    'push',
    githubPush(GH_REPO, sha('gone'), { ref: 'refs/heads/spike', deleted: true }),
    { secret: gh.secret },
  );
  assert.equal(ghDeleted.status, 200, ghDeleted.text);
  assert.equal(typeof ghDeleted.body.ignored, 'string');

  const gtDeleted = await sendWebhook(
    stack,
    'gitea',
    'push',
    giteaPush(GT_REPO, sha('gone'), { ref: 'refs/heads/spike', deleted: true }),
    { secret: gt.secret },
  );
  assert.equal(gtDeleted.status, 200, gtDeleted.text);
  assert.equal(typeof gtDeleted.body.ignored, 'string');

  const issues = await sendWebhook(
    stack,
    'github',
    'issues',
    {
      action: 'opened',
      issue: { number: 3 },
      repository: githubPush(GH_REPO, sha('i')).repository,
    },
    { secret: gh.secret },
  );
  assert.equal(issues.status, 200, issues.text);
  assert.equal(typeof issues.body.ignored, 'string');
  assert.equal(await countRows(stack, 'jobs'), jobs);
});

test('a disabled project answers 200 {ignored} to a signed push, and a bad signature is still 401', async () => {
  const off = await addProject({
    forge: 'github',
    id: 'auth-disabled',
    name: 'disabled',
    repo: 'acme/disabled',
  });
  const patched = await stack.call('PATCH', '/v1/projects/auth-disabled', {
    token: stack.adminToken,
    body: { enabled: false },
  });
  assert.equal(patched.status, 200, patched.text);
  assert.equal(patched.body.project.enabled, false);

  const jobs = await countRows(stack, 'jobs');
  const payload = githubPush('acme/disabled', sha('disabled'));
  assertUnauthorized(await sendWebhook(stack, 'github', 'push', payload, { secret: 'wrong' }));
  const ignored = await sendWebhook(stack, 'github', 'push', payload, { secret: off.secret });
  assert.equal(ignored.status, 200, ignored.text);
  assert.equal(typeof ignored.body.ignored, 'string');
  assert.equal(ignored.body.job_id, undefined);
  assert.equal(await countRows(stack, 'jobs'), jobs);

  // Enabled again, the same push builds.
  await stack.call('PATCH', '/v1/projects/auth-disabled', {
    token: stack.adminToken,
    body: { enabled: true },
  });
  const built = await sendWebhook(stack, 'github', 'push', payload, { secret: off.secret });
  assert.equal(built.status, 202, built.text);
});

test('a webhook body of exactly 5 MiB is not over the limit and goes on to the signature check', async () => {
  // 5 MiB of JSON for a known repository, unsigned: the contract's order makes it a 401.
  const payload = githubPush(GH_REPO, sha('five-mib'));
  const json = JSON.stringify({ ...payload, padding: '' });
  const raw = json.replace(
    '"padding":""',
    `"padding":"${'p'.repeat(5 * 1024 * 1024 - json.length)}"`,
  );
  assert.equal(Buffer.byteLength(raw), 5 * 1024 * 1024);
  const res = await sendWebhook(stack, 'github', 'push', null, { raw, secret: 'wrong' });
  assertUnauthorized(res);
});
