// lib/forge/gitlab/: GitLab's webhook dialect read from its documented payloads, the token
// check, and the API calls (compare, branch head, permission, statuses, hooks) against a fake
// GitLab on loopback that checks the project path encoding and the token.
import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import { ValidationError } from '../../lib/errors.ts';
import { resolveHead } from '../../lib/forge/branch.ts';
import { allowPrivateForges } from '../../lib/forge/client.ts';
import { changedFiles } from '../../lib/forge/compare.ts';
import { accessPermission, gitlabState } from '../../lib/forge/gitlab/index.ts';
import { createHook, deleteHook } from '../../lib/forge/hooks.ts';
import { askRepoPermission } from '../../lib/forge/permission.ts';
import { postStatus } from '../../lib/forge/statuses.ts';
import {
  parseWebhook,
  readPushDiff,
  readWebhookHeaders,
  signBody,
  verifySignature,
} from '../../lib/forge/webhook.ts';
import { type FakeGitlab, startFakeGitlab } from '../helpers/fake-gitlab.ts';
import { GL_REPO, gitlabMergeRequest, gitlabPush, gitlabTagPush } from './fixtures/gitlab.ts';

const A = 'a'.repeat(40);
const B = 'b'.repeat(40);

describe('GitLab webhooks', () => {
  test('a push to a branch builds its checkout_sha, trusted; a deleted branch is ignored', () => {
    const intent = parseWebhook('gitlab', 'Push Hook', gitlabPush(GL_REPO, A));
    assert.deepEqual(intent, {
      kind: 'build',
      repo: GL_REPO,
      trigger: 'push',
      ref: 'refs/heads/main',
      sha: A,
      baseRef: null,
      pullRequest: null,
      trusted: true,
    });
    const deleted = parseWebhook('gitlab', 'Push Hook', gitlabPush(GL_REPO, '0'.repeat(40)));
    assert.deepEqual(deleted, {
      kind: 'ignore',
      repo: GL_REPO,
      reason: 'deleted ref refs/heads/main',
    });
  });

  test('a tag push builds the tagged commit', () => {
    const intent = parseWebhook('gitlab', 'Tag Push Hook', gitlabTagPush(GL_REPO, 'v2', A, B));
    assert.equal(intent.kind, 'build');
    assert.equal(intent.kind === 'build' && intent.sha, A);
    assert.equal(intent.kind === 'build' && intent.trigger, 'tag');
  });

  test('merge requests: open and reopen build, update only with new commits, close and merge cancel, approval triggers nothing', () => {
    const mr = (action: Parameters<typeof gitlabMergeRequest>[0], extra = {}) =>
      parseWebhook(
        'gitlab',
        'Merge Request Hook',
        gitlabMergeRequest(action, { repo: GL_REPO, iid: 3, headSha: A, ...extra }),
      );
    for (const action of ['open', 'reopen'] as const) {
      const intent = mr(action);
      assert.equal(intent.kind, 'build', action);
      assert.equal(intent.kind === 'build' && intent.ref, 'refs/merge-requests/3/head');
      assert.equal(intent.kind === 'build' && intent.baseRef, 'main');
      assert.equal(intent.kind === 'build' && intent.trusted, true);
    }
    assert.equal(mr('update').kind, 'ignore');
    assert.equal(mr('update', { oldrev: B }).kind, 'build');
    assert.deepEqual(mr('close'), { kind: 'close_pull_request', repo: GL_REPO, pullRequest: 3 });
    assert.deepEqual(mr('merge'), { kind: 'close_pull_request', repo: GL_REPO, pullRequest: 3 });
    assert.equal(mr('approved').kind, 'ignore');
    const fork = mr('open', { fork: 'mallory/api' });
    assert.equal(fork.kind === 'build' && fork.trusted, false);
  });

  test("a merge request's bot user is named; a project access token's bot counts as one", () => {
    const intent = parseWebhook(
      'gitlab',
      'Merge Request Hook',
      gitlabMergeRequest('open', {
        repo: GL_REPO,
        iid: 4,
        headSha: A,
        user: 'project_15_bot_3f2a9c',
      }),
    );
    assert.deepEqual(intent.kind === 'build' && intent.bots, ['project_15_bot_3f2a9c']);
  });

  test('a field the event needs is a ValidationError naming it', () => {
    const payload = gitlabMergeRequest('open', { repo: GL_REPO, iid: 5, headSha: A });
    (payload.object_attributes as Record<string, unknown>).last_commit = { id: 'nope' };
    assert.throws(
      () => parseWebhook('gitlab', 'Merge Request Hook', payload),
      (err: unknown) =>
        err instanceof ValidationError &&
        err.issues.some((i) => i.path === 'object_attributes.last_commit.id'),
    );
    assert.throws(
      () => parseWebhook('gitlab', 'Push Hook', { ...gitlabPush(GL_REPO, A), project: {} }),
      (err: unknown) =>
        err instanceof ValidationError &&
        err.issues.some((i) => i.path === 'project.path_with_namespace'),
    );
  });

  test('the token is compared with the secret; an empty secret or header proves nothing', () => {
    const body = Buffer.from('{}');
    assert.equal(verifySignature('gitlab', body, 's3cret', 's3cret'), true);
    assert.equal(verifySignature('gitlab', body, 's3cret', 's3cres'), false);
    assert.equal(verifySignature('gitlab', body, 's3cret', 's3cret-and-more'), false);
    assert.equal(verifySignature('gitlab', body, 's3cret', undefined), false);
    assert.equal(verifySignature('gitlab', body, '', ''), false);
    assert.equal(signBody('gitlab', body, 's3cret'), 's3cret');
  });

  test('the delivery id is the event UUID, else the Idempotency-Key', () => {
    const base = { 'X-Gitlab-Event': 'Push Hook', 'X-Gitlab-Token': 't' };
    assert.equal(
      readWebhookHeaders('gitlab', {
        ...base,
        'X-Gitlab-Event-UUID': 'u-1',
        'Idempotency-Key': 'k-1',
      }).delivery,
      'u-1',
    );
    assert.equal(
      readWebhookHeaders('gitlab', { ...base, 'idempotency-key': 'k-1' }).delivery,
      'k-1',
    );
    assert.throws(
      () => readWebhookHeaders('gitlab', base),
      /missing X-Gitlab-Event-UUID header \(or Idempotency-Key\)/,
    );
  });

  test("a push's diff: its files when the list is whole (total_commits_count), else unknown", () => {
    const payload = gitlabPush(GL_REPO, A, { before: B, files: ['src/a.ts'] });
    assert.deepEqual(readPushDiff('gitlab', payload), {
      before: B,
      forced: false,
      created: false,
      files: ['src/a.ts'],
    });
    assert.equal(readPushDiff('gitlab', { ...payload, total_commits_count: 40 }).files, null);
  });

  test("Conductor's states in GitLab's words, and roles as permissions", () => {
    assert.equal(gitlabState('pending', 'waiting for the pipeline to be read'), 'pending');
    assert.equal(gitlabState('pending', 'running 3 tasks'), 'running');
    assert.equal(gitlabState('pending', 'deploy unblocked by @ann; running'), 'running');
    assert.equal(gitlabState('success', '3 passed'), 'success');
    assert.equal(gitlabState('failure', '1 failed'), 'failed');
    assert.equal(gitlabState('error', 'cancelled: superseded by #4'), 'canceled');
    assert.equal(gitlabState('error', 'declined: by @ann'), 'canceled');
    assert.equal(gitlabState('error', 'the pipeline has 1 error'), 'failed');
    assert.deepEqual([50, 40, 30, 20, 15, 10, 5].map(accessPermission), [
      'admin',
      'admin',
      'write',
      'read',
      'none',
      'none',
      'none',
    ]);
  });
});

const gitlab: FakeGitlab = await startFakeGitlab();
const src = {
  forge: 'gitlab' as const,
  repo: GL_REPO,
  repoUrl: `https://gitlab.example.com/${GL_REPO}.git`,
  forgeUrl: gitlab.url,
  githubApiUrl: 'https://api.github.invalid',
  token: gitlab.token,
};

describe('GitLab API', () => {
  before(() => allowPrivateForges(true));

  test('compare: the files of base...head from the merge base, renames with their old path', async () => {
    gitlab.setCompare(GL_REPO, A, B, [
      { old_path: 'a.txt', new_path: 'a.txt', new_file: false, renamed_file: false },
      { old_path: 'old/b.txt', new_path: 'new/b.txt', renamed_file: true },
    ]);
    assert.deepEqual(await changedFiles(src, A, B), {
      known: true,
      files: ['a.txt', 'new/b.txt', 'old/b.txt'],
    });
    const asked = gitlab.calls.find((c) => c.rawPath.endsWith('/repository/compare'))!;
    assert.deepEqual(asked.query, { from: A, to: B, straight: 'false' });
    assert.equal(
      asked.rawPath,
      `/api/v4/projects/${encodeURIComponent(GL_REPO)}/repository/compare`,
    );
  });

  test('compare: a timed-out or capped answer is not taken for the whole diff', async () => {
    gitlab.setCompare(GL_REPO, B, A, [{ old_path: 'x', new_path: 'x' }], { compare_timeout: true });
    const timedOut = await changedFiles(src, B, A);
    assert.equal(timedOut.known, false);
    const many = Array.from({ length: 1000 }, (_, i) => ({ old_path: `f${i}`, new_path: `f${i}` }));
    gitlab.setCompare(GL_REPO, A, A, many);
    const capped = await changedFiles(src, A, A);
    assert.equal(capped.known, false);
    assert.match(capped.known ? '' : capped.reason, /diff_max_files/);
  });

  test('branch head, tag head and the default branch', async () => {
    gitlab.setBranch(GL_REPO, 'feature/x', A);
    gitlab.setTag(GL_REPO, 'v1', B);
    gitlab.setDefaultBranch(GL_REPO, 'trunk');
    gitlab.setBranch(GL_REPO, 'trunk', B);
    assert.deepEqual(await resolveHead(src, 'feature/x'), {
      found: true,
      ref: 'refs/heads/feature/x',
      sha: A,
    });
    assert.deepEqual(await resolveHead(src, 'refs/tags/v1'), {
      found: true,
      ref: 'refs/tags/v1',
      sha: B,
    });
    assert.deepEqual(await resolveHead(src, null), {
      found: true,
      ref: 'refs/heads/trunk',
      sha: B,
    });
    const missing = await resolveHead(src, 'nope');
    assert.deepEqual(missing, { found: false, reason: `branch nope does not exist in ${GL_REPO}` });
    const refused = await resolveHead({ ...src, token: 'wrong' }, 'feature/x');
    assert.match(refused.found ? '' : refused.reason, /HTTP 401/);
  });

  test("a person's permission comes from the project's members, matched by exact username", async () => {
    gitlab.setMember(GL_REPO, 'maria', 40);
    gitlab.setMember(GL_REPO, 'mariana', 30);
    gitlab.setMember(GL_REPO, 'rita', 20);
    const ask = (login: string) =>
      askRepoPermission({
        forge: 'gitlab',
        api: `${gitlab.url}/api/v4`,
        repo: GL_REPO,
        login,
        token: gitlab.token,
      });
    assert.deepEqual(await ask('maria'), { kind: 'answer', permission: 'admin' });
    assert.deepEqual(await ask('mariana'), { kind: 'answer', permission: 'write' });
    assert.deepEqual(await ask('rita'), { kind: 'answer', permission: 'read' });
    assert.deepEqual(await ask('stranger'), { kind: 'answer', permission: 'none' });
  });

  test('a status is posted under its name with the job link and a GitLab state', async () => {
    await postStatus(
      {
        forge: 'gitlab',
        repo: GL_REPO,
        forgeUrl: gitlab.url,
        githubApiUrl: '',
        token: gitlab.token,
      },
      {
        sha: A,
        state: 'failure',
        pipelineName: 'ci',
        trusted: true,
        description: '1 failed',
        targetUrl: 'https://ci.example.com/jobs/1',
      },
    );
    const [post] = gitlab.statusesFor(A);
    assert.deepEqual(post!.body, {
      state: 'failed',
      name: 'conductor/ci',
      description: '1 failed',
      target_url: 'https://ci.example.com/jobs/1',
    });
  });

  test('a hook is created with the push, tag push and merge request events and the token, then deleted', async () => {
    const target = {
      forge: 'gitlab' as const,
      repo: GL_REPO,
      forgeUrl: gitlab.url,
      githubApiUrl: '',
      token: gitlab.token,
    };
    const made = await createHook(target, {
      url: 'https://ci.example.com/v1/webhooks/gitlab',
      secret: 'shh',
    });
    assert.equal(made.ok, true);
    const id = made.ok ? made.id : '';
    assert.deepEqual(gitlab.hooks.get(Number(id))?.body, {
      url: 'https://ci.example.com/v1/webhooks/gitlab',
      token: 'shh',
      push_events: true,
      tag_push_events: true,
      merge_requests_events: true,
      enable_ssl_verification: true,
    });
    assert.deepEqual(await deleteHook(target, id), { ok: true });
    assert.equal(gitlab.hooks.size, 0);
    // Already gone: still deleted.
    assert.deepEqual(await deleteHook(target, id), { ok: true });
  });
});
