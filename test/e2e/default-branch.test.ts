// A project's default branch is what the forge's verified webhooks say
// (`repository.default_branch`), so a repository whose default is not `main`
// gets its cache fallback and its Run form right without any setting.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { readScopes } from '../../lib/storage/index.ts';
import { giteaPullRequest } from '../forge/fixtures/gitea.ts';
import { githubPush } from '../forge/fixtures/github.ts';
import { sendWebhook, startE2E } from './calls.ts';
import { pipeline, sha } from './payloads.ts';

const { fake, stack, addProject } = await startE2E(import.meta.filename);
const admin = { token: stack.adminToken };

async function defaultBranch(id: string): Promise<string | null> {
  const got = await stack.call('GET', `/v1/projects/${id}`, admin);
  assert.equal(got.status, 200, got.text);
  return got.body.project.default_branch;
}

/** A push payload whose repository says `branch` is its default. */
function pushSaying(repo: string, commit: string, branch: unknown) {
  const payload = githubPush(repo, commit);
  (payload.repository as Record<string, unknown>).default_branch = branch;
  return payload;
}

test('a verified push names the default branch; a later one that changes it is kept; a bad name or a bad signature changes nothing', async () => {
  const repo = 'acme/trunk';
  const { secret } = await addProject({ forge: 'github', id: 'trunk', repo });
  assert.equal(await defaultBranch('trunk'), null, 'unknown before any webhook');
  const commit = sha('trunk');
  fake.setFile(repo, commit, pipeline('trunk', '  a:\n    script: [make]\n'));

  const first = await sendWebhook(stack, 'github', 'push', pushSaying(repo, commit, 'develop'), {
    secret,
  });
  assert.equal(first.status, 202, first.text);
  assert.equal(await defaultBranch('trunk'), 'develop');

  const renamed = await sendWebhook(stack, 'github', 'push', pushSaying(repo, commit, 'trunk'), {
    secret,
  });
  assert.ok(renamed.status < 300, renamed.text);
  assert.equal(await defaultBranch('trunk'), 'trunk');

  for (const bad of ['a..b', 'has space', '', 42]) {
    const res = await sendWebhook(stack, 'github', 'push', pushSaying(repo, commit, bad), {
      secret,
    });
    assert.ok(res.status < 300, res.text);
  }
  const forged = await sendWebhook(stack, 'github', 'push', pushSaying(repo, commit, 'evil'), {
    secret: 'not-the-secret',
  });
  assert.equal(forged.status, 401);
  assert.equal(await defaultBranch('trunk'), 'trunk');
});

test("a Gitea pull request names it too, and a job's caches fall back to it instead of main", async () => {
  const repo = 'acme/gitea-develop';
  const { secret } = await addProject({ forge: 'gitea', id: 'gitea-develop', repo });
  const payload = giteaPullRequest('opened', { repo, baseRef: 'feature-base' });
  (payload.repository as Record<string, unknown>).default_branch = 'develop';
  fake.setFile(repo, payload.pull_request.head.sha, pipeline('gd', '  a:\n    script: [make]\n'));
  const res = await sendWebhook(stack, 'gitea', 'pull_request', payload, { secret });
  assert.equal(res.status, 202, res.text);
  assert.equal(await defaultBranch('gitea-develop'), 'develop');
  // The scopes a restore reads for a job of that project, as the runner routes
  // build them from the task's row (lib/storage/rows.ts, leasedTask).
  assert.deepEqual(
    readScopes({
      ref: 'refs/pull/12/head',
      base_ref: 'feature-base',
      trusted: true,
      default_branch: 'develop',
    }),
    ['refs/pull/12/head', 'refs/heads/feature-base', 'refs/heads/develop'],
  );
  assert.deepEqual(
    readScopes({ ref: 'refs/heads/x', base_ref: null, trusted: true, default_branch: null }),
    ['refs/heads/x', 'refs/heads/main'],
  );
});
