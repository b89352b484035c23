// Which deliveries carry a bot's code (issue #28): the webhook parser names the bot accounts
// behind a pull request (its sender or author) or behind a push to a branch other than the
// default, and nobody else. Whether they are trusted is the project's (test/e2e/bots.test.ts).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { isBotAccount, parseWebhook, type WebhookIntent } from '../../lib/forge/webhook.ts';
import {
  GT_REPO,
  giteaPullRequest,
  giteaPush,
  giteaRenovatePullRequest,
  giteaRenovatePush,
  giteaTagPush,
} from './fixtures/gitea.ts';
import {
  GH_REPO,
  githubDependabot,
  githubDependabotPullRequest,
  githubDependabotPush,
  githubPullRequest,
  githubPush,
  githubPushAnnotatedTag,
} from './fixtures/github.ts';

function build(intent: WebhookIntent) {
  assert.equal(intent.kind, 'build');
  return intent as Extract<WebhookIntent, { kind: 'build' }>;
}

describe('GitHub', () => {
  test("Dependabot's pull request from a branch of the repository names dependabot[bot]", () => {
    const intent = build(
      parseWebhook('github', 'pull_request', githubDependabotPullRequest('opened')),
    );
    assert.deepEqual(intent.bots, ['dependabot[bot]']);
    assert.equal(intent.trusted, true, 'the head is a branch of the repository');
  });

  test("a person who reopens or pushes to a bot's pull request does not make it theirs", () => {
    const payload = githubDependabotPullRequest('reopened');
    payload.sender = githubPullRequest('opened').sender;
    assert.deepEqual(build(parseWebhook('github', 'pull_request', payload)).bots, [
      'dependabot[bot]',
    ]);
  });

  test('a bot updating a person\'s pull request makes it a bot\'s (sender "type": "Bot")', () => {
    const payload = githubPullRequest('synchronize');
    payload.sender = { ...githubDependabot(), login: 'pre-commit-ci[bot]' };
    assert.deepEqual(build(parseWebhook('github', 'pull_request', payload)).bots, [
      'pre-commit-ci[bot]',
    ]);
  });

  test("a person's pull request and a person's push name no bot", () => {
    assert.equal(
      build(parseWebhook('github', 'pull_request', githubPullRequest('opened'))).bots,
      undefined,
    );
    assert.equal(
      build(parseWebhook('github', 'push', githubPush(GH_REPO, undefined, { ref: 'refs/heads/x' })))
        .bots,
      undefined,
    );
  });

  test("Dependabot's push of its branch names it; a bot's push to the default branch or a tag does not", () => {
    assert.deepEqual(build(parseWebhook('github', 'push', githubDependabotPush())).bots, [
      'dependabot[bot]',
    ]);
    const toMain = { ...githubDependabotPush(), ref: 'refs/heads/main' };
    assert.equal(build(parseWebhook('github', 'push', toMain)).bots, undefined);
    const tag = { ...githubPushAnnotatedTag(), sender: githubDependabot() };
    assert.equal(build(parseWebhook('github', 'push', tag)).bots, undefined);
  });

  test("a bot's push whose repository does not name its default branch counts as another branch", () => {
    const payload = { ...githubDependabotPush(), ref: 'refs/heads/main' };
    const { default_branch: _, ...repository } = payload.repository;
    assert.deepEqual(build(parseWebhook('github', 'push', { ...payload, repository })).bots, [
      'dependabot[bot]',
    ]);
  });
});

describe('Gitea', () => {
  test("Renovate's pull request from a branch of the repository names renovate-bot, and Gitea is still asked about its people", () => {
    const intent = build(parseWebhook('gitea', 'pull_request', giteaRenovatePullRequest('opened')));
    assert.deepEqual(intent.bots, ['renovate-bot']);
    assert.deepEqual(intent.confirmWriters, ['renovate-bot']);
  });

  test("Renovate's push of its branch names it; to the default branch or a tag it does not", () => {
    assert.deepEqual(build(parseWebhook('gitea', 'push', giteaRenovatePush())).bots, [
      'renovate-bot',
    ]);
    const toMain = { ...giteaRenovatePush(), ref: 'refs/heads/main' };
    assert.equal(build(parseWebhook('gitea', 'push', toMain)).bots, undefined);
    const tag = { ...giteaTagPush(), sender: giteaRenovatePush().sender };
    assert.equal(build(parseWebhook('gitea', 'push', tag)).bots, undefined);
  });

  test("a person's pull request and push name no bot", () => {
    assert.equal(
      build(parseWebhook('gitea', 'pull_request', giteaPullRequest('opened'))).bots,
      undefined,
    );
    const push = giteaPush(GT_REPO, undefined, { ref: 'refs/heads/storm-surge' });
    assert.equal(build(parseWebhook('gitea', 'push', push)).bots, undefined);
  });
});

test('a bot account is one GitHub marks "Bot", or one whose login ends in [bot], -bot, _bot or .bot', () => {
  for (const bot of [
    { login: 'dependabot[bot]', type: 'Bot' },
    { login: 'some-app', type: 'Bot' },
    { login: 'renovate[bot]', username: 'renovate[bot]' },
    { login: 'Renovate-Bot' },
    { login: 'ci_bot' },
    { login: 'release.bot' },
    // GitHub's `pusher` has only a name and an email.
    { name: 'dependabot[bot]', email: '49699333+dependabot[bot]@users.noreply.github.com' },
  ]) {
    assert.equal(isBotAccount(bot), true, JSON.stringify(bot));
  }
  for (const person of [
    { login: 'abbot', type: 'User' },
    { login: 'talbot' },
    { login: 'robot' },
    { login: 'bot' },
    // A display name is the person's to choose; the login decides.
    { login: 'ines', name: 'ines-bot' },
    null,
    'dependabot[bot]',
    {},
  ]) {
    assert.equal(isBotAccount(person), false, JSON.stringify(person));
  }
});
