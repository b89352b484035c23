import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parseWebhook } from '../../lib/forge/webhook.ts';
import {
  GT_REPO,
  GT_SHA,
  giteaCreate,
  giteaDelete,
  giteaPullRequest,
  giteaPush,
  giteaTagPush,
} from './fixtures/gitea.ts';

describe('Gitea push', () => {
  test('a push to a branch builds the pushed commit, trusted', () => {
    assert.deepEqual(parseWebhook('gitea', 'push', giteaPush()), {
      kind: 'build',
      repo: GT_REPO,
      trigger: 'push',
      ref: 'refs/heads/main',
      sha: GT_SHA.after,
      baseRef: null,
      pullRequest: null,
      trusted: true,
    });
  });

  test('a tag push builds the tagged commit', () => {
    assert.deepEqual(parseWebhook('gitea', 'push', giteaTagPush()), {
      kind: 'build',
      repo: GT_REPO,
      trigger: 'tag',
      ref: 'refs/tags/v0.9.0',
      sha: GT_SHA.after,
      baseRef: null,
      pullRequest: null,
      trusted: true,
    });
  });

  test('a push whose `after` is all zeros deleted its ref and is ignored', () => {
    const payload = { ...giteaPush(), ref: 'refs/heads/old-harbour-map', after: GT_SHA.zero };
    assert.deepEqual(parseWebhook('gitea', 'push', payload), {
      kind: 'ignore',
      repo: GT_REPO,
      reason: 'deleted ref refs/heads/old-harbour-map',
    });
  });

  test('a repository in SHA-256 format pushes 64-digit shas, which build', () => {
    const payload = { ...giteaPush(), after: GT_SHA.sha256, head_commit: null, commits: [] };
    const intent = parseWebhook('gitea', 'push', payload);
    assert.equal(intent.kind === 'build' && intent.sha, GT_SHA.sha256);
  });
});

describe('Gitea delete and create', () => {
  test('the delete event is ignored as a deleted ref', () => {
    assert.deepEqual(parseWebhook('gitea', 'delete', giteaDelete()), {
      kind: 'ignore',
      repo: GT_REPO,
      reason: 'deleted ref old-harbour-map',
    });
  });

  test('the create event is ignored: the push event that comes with it builds', () => {
    assert.deepEqual(parseWebhook('gitea', 'create', giteaCreate()), {
      kind: 'ignore',
      repo: GT_REPO,
      reason: 'create event: the push event for the new ref builds it',
    });
  });

  test('events Conductor does not build are ignored, naming them', () => {
    const payload = { action: 'published', repository: { full_name: GT_REPO } };
    assert.deepEqual(parseWebhook('gitea', 'release', payload), {
      kind: 'ignore',
      repo: GT_REPO,
      reason: 'event "release" triggers nothing',
    });
  });
});

describe('Gitea pull_request', () => {
  test('opened from a fork builds the head, untrusted', () => {
    const payload = giteaPullRequest('opened', { fromFork: true });
    assert.deepEqual(parseWebhook('gitea', 'pull_request', payload), {
      kind: 'build',
      repo: GT_REPO,
      trigger: 'pull_request',
      ref: 'refs/pull/12/head',
      sha: GT_SHA.prHead,
      baseRef: 'main',
      pullRequest: 12,
      trusted: false,
    });
  });

  test('synchronized from a fork builds the new head, untrusted', () => {
    const payload = giteaPullRequest('synchronized', { fromFork: true });
    const intent = parseWebhook('gitea', 'pull_request', payload);
    assert.equal(intent.kind, 'build');
    assert.equal(intent.kind === 'build' && intent.trusted, false);
    assert.equal(intent.kind === 'build' && intent.sha, GT_SHA.prHead);
  });

  test('synchronized from the same repository is untrusted until Gitea confirms its sender and author as writers (AGit)', () => {
    const payload = giteaPullRequest('synchronized');
    const intent = parseWebhook('gitea', 'pull_request', payload);
    assert.equal(intent.kind === 'build' && intent.trusted, false);
    const logins = [payload.sender.login, payload.pull_request.user.login];
    assert.deepEqual(
      intent.kind === 'build' && intent.confirmWriters,
      logins.filter((l, i) => logins.indexOf(l) === i),
    );
  });

  test("GitHub's spelling `synchronize` is accepted from Gitea too", () => {
    const intent = parseWebhook('gitea', 'pull_request', giteaPullRequest('synchronize'));
    assert.equal(intent.kind, 'build');
  });

  test('closed asks to cancel the pull request', () => {
    assert.deepEqual(parseWebhook('gitea', 'pull_request', giteaPullRequest('closed')), {
      kind: 'close_pull_request',
      repo: GT_REPO,
      pullRequest: 12,
    });
  });

  test('label and assignment changes are ignored, naming the action', () => {
    for (const action of ['label_updated', 'assigned', 'edited']) {
      assert.deepEqual(parseWebhook('gitea', 'pull_request', giteaPullRequest(action)), {
        kind: 'ignore',
        repo: GT_REPO,
        reason: `pull_request action "${action}" triggers nothing`,
      });
    }
  });
});
