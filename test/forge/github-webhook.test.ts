import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parseWebhook } from '../../lib/forge/webhook.ts';
import {
  GH_REPO,
  GH_SHA,
  githubPing,
  githubPullRequest,
  githubPushAnnotatedTag,
  githubPushBranch,
  githubPushDeleteBranch,
  githubPushLightweightTag,
} from './fixtures/github.ts';

describe('GitHub push', () => {
  test('a push to a branch builds the pushed commit, trusted', () => {
    assert.deepEqual(parseWebhook('github', 'push', githubPushBranch()), {
      kind: 'build',
      repo: GH_REPO,
      trigger: 'push',
      ref: 'refs/heads/main',
      sha: GH_SHA.after,
      baseRef: null,
      pullRequest: null,
      trusted: true,
    });
  });

  test('an annotated tag builds the tagged commit, not the tag object in `after`', () => {
    // The tag object's sha is useless to the contents and status APIs; head_commit names the commit.
    assert.deepEqual(parseWebhook('github', 'push', githubPushAnnotatedTag()), {
      kind: 'build',
      repo: GH_REPO,
      trigger: 'tag',
      ref: 'refs/tags/v2.4.0',
      sha: GH_SHA.after,
      baseRef: null,
      pullRequest: null,
      trusted: true,
    });
  });

  test('a lightweight tag builds `after`, which is the commit', () => {
    const intent = parseWebhook('github', 'push', githubPushLightweightTag());
    assert.equal(intent.kind === 'build' && intent.trigger, 'tag');
    assert.equal(intent.kind === 'build' && intent.sha, GH_SHA.after);
  });

  test('a tag push without a usable head_commit falls back to `after`', () => {
    for (const headCommit of [null, undefined, 'weird', { id: 'not-a-sha' }]) {
      const payload = { ...githubPushAnnotatedTag(), head_commit: headCommit };
      const intent = parseWebhook('github', 'push', payload);
      assert.equal(intent.kind === 'build' && intent.sha, GH_SHA.tagObject);
    }
  });

  test('a deleted branch is ignored', () => {
    assert.deepEqual(parseWebhook('github', 'push', githubPushDeleteBranch()), {
      kind: 'ignore',
      repo: GH_REPO,
      reason: 'deleted ref refs/heads/spike/fx-rates',
    });
  });

  test('`deleted: true` alone is enough to ignore the push', () => {
    const payload = { ...githubPushBranch(), deleted: true };
    assert.equal(parseWebhook('github', 'push', payload).kind, 'ignore');
  });

  test('a push to a ref that is neither a branch nor a tag is ignored', () => {
    const payload = { ...githubPushBranch(), ref: 'refs/notes/commits' };
    assert.deepEqual(parseWebhook('github', 'push', payload), {
      kind: 'ignore',
      repo: GH_REPO,
      reason: 'push to refs/notes/commits is neither a branch nor a tag',
    });
  });
});

describe('GitHub ping and other events', () => {
  test('ping is ignored as "ping"', () => {
    assert.deepEqual(parseWebhook('github', 'ping', githubPing()), {
      kind: 'ignore',
      repo: GH_REPO,
      reason: 'ping',
    });
  });

  test('an event Conductor does not build is ignored, naming it', () => {
    const payload = { action: 'opened', issue: { number: 3 }, repository: { full_name: GH_REPO } };
    assert.deepEqual(parseWebhook('github', 'issues', payload), {
      kind: 'ignore',
      repo: GH_REPO,
      reason: 'event "issues" triggers nothing',
    });
  });
});

describe('GitHub pull_request', () => {
  test('opened from a branch of the same repository builds the head, trusted', () => {
    assert.deepEqual(parseWebhook('github', 'pull_request', githubPullRequest('opened')), {
      kind: 'build',
      repo: GH_REPO,
      trigger: 'pull_request',
      ref: 'refs/pull/57/head',
      sha: GH_SHA.prHead,
      baseRef: 'main',
      pullRequest: 57,
      trusted: true,
    });
  });

  test('synchronize from a fork builds the head, untrusted', () => {
    const payload = githubPullRequest('synchronize', { fromFork: true });
    assert.deepEqual(parseWebhook('github', 'pull_request', payload), {
      kind: 'build',
      repo: GH_REPO,
      trigger: 'pull_request',
      ref: 'refs/pull/57/head',
      sha: GH_SHA.prHead,
      baseRef: 'main',
      pullRequest: 57,
      trusted: false,
    });
  });

  test('reopened builds like opened', () => {
    const intent = parseWebhook('github', 'pull_request', githubPullRequest('reopened'));
    assert.equal(intent.kind, 'build');
  });

  test("Gitea's spelling `synchronized` is accepted from GitHub too", () => {
    const intent = parseWebhook('github', 'pull_request', githubPullRequest('synchronized'));
    assert.equal(intent.kind, 'build');
  });

  test('a pull request whose fork was deleted (head.repo null) is untrusted', () => {
    const payload = githubPullRequest('synchronize', { fromFork: true });
    (payload.pull_request.head as { repo: unknown }).repo = null;
    const intent = parseWebhook('github', 'pull_request', payload);
    assert.equal(intent.kind === 'build' && intent.trusted, false);
    delete (payload.pull_request.head as { repo?: unknown }).repo;
    const again = parseWebhook('github', 'pull_request', payload);
    assert.equal(again.kind === 'build' && again.trusted, false);
  });

  test('a fork whose name differs only in case is still a different repository', () => {
    const payload = githubPullRequest('opened');
    payload.pull_request.head.repo.full_name = GH_REPO.toUpperCase();
    const intent = parseWebhook('github', 'pull_request', payload);
    assert.equal(intent.kind === 'build' && intent.trusted, false);
  });

  test('closed asks to cancel the pull request', () => {
    assert.deepEqual(parseWebhook('github', 'pull_request', githubPullRequest('closed')), {
      kind: 'close_pull_request',
      repo: GH_REPO,
      pullRequest: 57,
    });
  });

  test('labeled and other actions are ignored, naming the action', () => {
    for (const action of [
      'labeled',
      'edited',
      'assigned',
      'review_requested',
      'ready_for_review',
    ]) {
      assert.deepEqual(parseWebhook('github', 'pull_request', githubPullRequest(action)), {
        kind: 'ignore',
        repo: GH_REPO,
        reason: `pull_request action "${action}" triggers nothing`,
      });
    }
  });
});
