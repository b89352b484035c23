// Every shape of push and pull request the forges document must be taken, not only the shape
// today's versions send: a field an event does not need may be absent or null (issue #20).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { type ForgeKind, parseWebhook, type WebhookIntent } from '../../lib/forge/webhook.ts';
import { type Omission, thinned, withField, without } from './fixtures/fields.ts';
import {
  GT_PULL_REQUEST_OPTIONAL,
  GT_PUSH_OPTIONAL,
  GT_REPO,
  GT_SHA,
  giteaPullRequest,
  giteaPush,
  giteaPushAsDocumented,
  giteaTagPush,
} from './fixtures/gitea.ts';
import {
  GH_PULL_REQUEST_OPTIONAL,
  GH_PUSH_OPTIONAL,
  GH_REPO,
  GH_SHA,
  githubPullRequest,
  githubPushBranch,
  githubPushLightweightTag,
  githubPushNullHeadCommit,
} from './fixtures/github.ts';

const OMISSIONS: Omission[] = ['absent', 'null'];

interface Dialect {
  forge: ForgeKind;
  repo: string;
  push: () => object;
  pushOptional: readonly string[];
  pullRequest: (action: string) => object;
  pullRequestOptional: readonly string[];
  /** The number of the fixture's pull request. */
  number: number;
  /** The actions that build, as this forge spells them. */
  buildActions: string[];
  /**
   * Whether a pull request's trust is read from the payload alone. On GitHub it is (the head
   * repository); on Gitea a same-repository pull request may be an AGit push by anyone who can
   * read, so the contract has the forge confirm the sender, and the tests leave trust to that.
   */
  trustFromPayload: boolean;
}

const DIALECTS: Dialect[] = [
  {
    forge: 'github',
    repo: GH_REPO,
    push: githubPushBranch,
    pushOptional: GH_PUSH_OPTIONAL,
    pullRequest: (action) => githubPullRequest(action),
    pullRequestOptional: GH_PULL_REQUEST_OPTIONAL,
    number: 57,
    buildActions: ['opened', 'synchronize', 'reopened'],
    trustFromPayload: true,
  },
  {
    forge: 'gitea',
    repo: GT_REPO,
    push: giteaPush,
    pushOptional: GT_PUSH_OPTIONAL,
    pullRequest: (action) => giteaPullRequest(action),
    pullRequestOptional: GT_PULL_REQUEST_OPTIONAL,
    number: 12,
    buildActions: ['opened', 'synchronized', 'reopened'],
    trustFromPayload: false,
  },
];

/** The intent of a trusted push to a branch. */
function branchBuild(repo: string, ref: string, sha: string) {
  return {
    kind: 'build',
    repo,
    trigger: 'push',
    ref,
    sha,
    baseRef: null,
    pullRequest: null,
    trusted: true,
  };
}

const BUILD_KEYS = ['kind', 'repo', 'trigger', 'ref', 'sha', 'baseRef', 'pullRequest'] as const;

/** What an intent builds, leaving out how far it is trusted. */
function buildOf(intent: WebhookIntent): Record<string, unknown> {
  return Object.fromEntries(
    BUILD_KEYS.map((key) => [key, (intent as Record<string, unknown>)[key]]),
  );
}

function isTrusted(intent: WebhookIntent): boolean {
  return intent.kind === 'build' && intent.trusted;
}

/**
 * A thinner payload builds the same and is trusted no more than the full one; where trust is
 * read from the payload alone (GitHub), the intent is the same to the letter.
 */
function assertSameBuild(
  dialect: Dialect,
  thin: WebhookIntent,
  full: WebhookIntent,
  label: string,
): void {
  if (dialect.trustFromPayload) {
    assert.deepEqual(thin, full, label);
    return;
  }
  assert.deepEqual(buildOf(thin), buildOf(full), label);
  assert.ok(!isTrusted(thin) || isTrusted(full), `${label}: leaving a field out raised trust`);
}

/**
 * For each forge's opened pull request: its intent in full, and the intent with `path` absent
 * and with it null, for `check` to compare.
 */
function eachOpenedWithout(
  path: string,
  check: (dialect: Dialect, full: WebhookIntent, thin: WebhookIntent, label: string) => void,
): void {
  for (const dialect of DIALECTS) {
    const { forge, pullRequest } = dialect;
    const full = parseWebhook(forge, 'pull_request', pullRequest('opened'));
    for (const how of OMISSIONS) {
      const thin = parseWebhook(forge, 'pull_request', thinned(pullRequest('opened'), [path], how));
      check(dialect, full, thin, `${forge} ${path} ${how}`);
    }
  }
}

describe('push shapes', () => {
  test("the push Gitea's documentation shows (no head_commit, a top-level secret) builds `after`", () => {
    assert.deepEqual(
      parseWebhook('gitea', 'push', giteaPushAsDocumented()),
      branchBuild(GT_REPO, 'refs/heads/develop', GT_SHA.after),
    );
  });

  test('the deprecated `secret` field changes nothing, whatever it holds or when it is gone', () => {
    const intent = parseWebhook('gitea', 'push', giteaPushAsDocumented());
    for (const secret of [null, 42, '', { nested: true }]) {
      const payload = withField(giteaPushAsDocumented(), 'secret', secret);
      assert.deepEqual(parseWebhook('gitea', 'push', payload), intent, JSON.stringify(secret));
    }
    const gone = without(giteaPushAsDocumented(), 'secret');
    assert.deepEqual(parseWebhook('gitea', 'push', gone), intent);
  });

  test('a GitHub push with head_commit: null builds `after`', () => {
    assert.deepEqual(
      parseWebhook('github', 'push', githubPushNullHeadCommit()),
      branchBuild(GH_REPO, 'refs/heads/release/2.4', GH_SHA.after),
    );
  });

  test('a push of nothing but ref, after and repository.full_name builds', () => {
    for (const { forge, repo } of DIALECTS) {
      const payload = {
        ref: 'refs/heads/main',
        after: GH_SHA.after,
        repository: { full_name: repo },
      };
      assert.deepEqual(
        parseWebhook(forge, 'push', payload),
        branchBuild(repo, 'refs/heads/main', GH_SHA.after),
      );
    }
  });

  test('each field a push does not need may be absent or null, one at a time or all at once', () => {
    for (const { forge, push, pushOptional } of DIALECTS) {
      const intent = parseWebhook(forge, 'push', push());
      assert.equal(intent.kind, 'build');
      for (const how of OMISSIONS) {
        for (const path of pushOptional) {
          const payload = thinned(push(), [path], how);
          assert.deepEqual(parseWebhook(forge, 'push', payload), intent, `${forge} ${path} ${how}`);
        }
        const bare = thinned(push(), pushOptional, how);
        assert.deepEqual(parseWebhook(forge, 'push', bare), intent, `${forge} all ${how}`);
      }
    }
  });

  test('a tag push without head_commit builds `after`, the commit a lightweight tag names', () => {
    for (const [forge, payload, sha] of [
      ['github', githubPushLightweightTag(), GH_SHA.after],
      ['gitea', { ...giteaTagPush(), after: GT_SHA.after }, GT_SHA.after],
    ] as const) {
      for (const how of OMISSIONS) {
        const intent = parseWebhook(
          forge,
          'push',
          thinned(structuredClone(payload), ['head_commit'], how),
        );
        assert.equal(intent.kind === 'build' && intent.trigger, 'tag', `${forge} ${how}`);
        assert.equal(intent.kind === 'build' && intent.sha, sha, `${forge} ${how}`);
      }
    }
  });
});

describe('pull request shapes', () => {
  test('each field a pull request build does not need may be absent or null, one at a time or all at once', () => {
    for (const dialect of DIALECTS) {
      const { forge, pullRequest, pullRequestOptional, buildActions } = dialect;
      for (const action of buildActions) {
        const full = parseWebhook(forge, 'pull_request', pullRequest(action));
        assert.equal(full.kind, 'build', `${forge} ${action}`);
        if (dialect.trustFromPayload) assert.ok(isTrusted(full), `${forge} ${action}`);
        for (const how of OMISSIONS) {
          for (const path of pullRequestOptional) {
            const payload = thinned(pullRequest(action), [path], how);
            const thin = parseWebhook(forge, 'pull_request', payload);
            assertSameBuild(dialect, thin, full, `${forge} ${action} ${path} ${how}`);
          }
          const bare = thinned(pullRequest(action), pullRequestOptional, how);
          const thin = parseWebhook(forge, 'pull_request', bare);
          assertSameBuild(dialect, thin, full, `${forge} ${action} all ${how}`);
        }
      }
    }
  });

  test('the top-level number may be absent or null when pull_request.number has it', () => {
    eachOpenedWithout('number', (_dialect, full, thin, label) => {
      assert.deepEqual(thin, full, label);
    });
  });

  test('a missing or null base repository is the webhook repository: a same-repository branch is trusted as before', () => {
    eachOpenedWithout('pull_request.base.repo', (_dialect, full, thin, label) => {
      assert.deepEqual(thin, full, label);
    });
  });

  test('a missing or null head repository (a deleted fork) builds, untrusted', () => {
    eachOpenedWithout('pull_request.head.repo', (_dialect, full, thin, label) => {
      assert.deepEqual(buildOf(thin), buildOf(full), label);
      assert.equal(isTrusted(thin), false, label);
    });
  });

  test('a pull request of nothing but what the job needs builds', () => {
    for (const dialect of DIALECTS) {
      const { forge, repo } = dialect;
      const payload = {
        action: 'opened',
        number: 9,
        pull_request: {
          head: { sha: GT_SHA.prHead, repo: { full_name: repo } },
          base: { ref: 'main', repo: { full_name: repo } },
        },
        repository: { full_name: repo },
      };
      const intent = parseWebhook(forge, 'pull_request', payload);
      assert.deepEqual(buildOf(intent), {
        kind: 'build',
        repo,
        trigger: 'pull_request',
        ref: 'refs/pull/9/head',
        sha: GT_SHA.prHead,
        baseRef: 'main',
        pullRequest: 9,
      });
      if (dialect.trustFromPayload) assert.equal(isTrusted(intent), true, forge);
    }
  });

  test('a closed pull request cancels however thin it is, with the number in either place', () => {
    for (const { forge, repo, pullRequest, pullRequestOptional, number } of DIALECTS) {
      const close = parseWebhook(forge, 'pull_request', pullRequest('closed'));
      assert.deepEqual(close, { kind: 'close_pull_request', repo, pullRequest: number });
      for (const how of OMISSIONS) {
        const bare = thinned(pullRequest('closed'), pullRequestOptional, how);
        assert.deepEqual(parseWebhook(forge, 'pull_request', bare), close, `${forge} ${how}`);
        const noPullRequest = thinned(pullRequest('closed'), ['pull_request'], how);
        assert.deepEqual(
          parseWebhook(forge, 'pull_request', noPullRequest),
          close,
          `${forge} ${how}`,
        );
      }
      const nestedOnly = {
        action: 'closed',
        pull_request: { number },
        repository: { full_name: repo },
      };
      assert.deepEqual(parseWebhook(forge, 'pull_request', nestedOnly), close, forge);
    }
  });

  test('a build still needs the head sha and the base ref, and names them', () => {
    for (const { forge, pullRequest } of DIALECTS) {
      for (const path of ['pull_request.head.sha', 'pull_request.base.ref']) {
        for (const how of OMISSIONS) {
          const payload = thinned(pullRequest('opened'), [path], how);
          assert.throws(
            () => parseWebhook(forge, 'pull_request', payload),
            (error: Error) => error.message.startsWith(`${path}: `),
            `${forge} ${path} ${how}`,
          );
        }
      }
    }
  });
});
