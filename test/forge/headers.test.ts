import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { BadRequestError } from '../../lib/errors.ts';
import { readWebhookHeaders } from '../../lib/forge/webhook.ts';

const DELIVERY = '72d3162e-cc78-11e3-81ab-4c9367dc0958';

describe('readWebhookHeaders', () => {
  test('reads GitHub headers whatever the case of their names', () => {
    const sig = `sha256=${'ab'.repeat(32)}`;
    for (const headers of [
      { 'X-GitHub-Event': 'push', 'X-GitHub-Delivery': DELIVERY, 'X-Hub-Signature-256': sig },
      { 'x-github-event': 'push', 'x-github-delivery': DELIVERY, 'x-hub-signature-256': sig },
      { 'X-GITHUB-EVENT': 'push', 'x-GitHub-delivery': DELIVERY, 'X-HUB-SIGNATURE-256': sig },
    ]) {
      assert.deepEqual(readWebhookHeaders('github', headers), {
        event: 'push',
        delivery: DELIVERY,
        signature: sig,
      });
    }
  });

  test('reads Gitea headers, not the GitHub-compatible copies Gitea also sends', () => {
    const headers = {
      'x-gitea-event': 'pull_request',
      'x-gitea-event-type': 'pull_request_sync',
      'x-gitea-delivery': DELIVERY,
      'x-gitea-signature': 'cd'.repeat(32),
      'x-github-event': 'pull_request',
      'x-hub-signature-256': `sha256=${'cd'.repeat(32)}`,
    };
    assert.deepEqual(readWebhookHeaders('gitea', headers), {
      event: 'pull_request',
      delivery: DELIVERY,
      signature: 'cd'.repeat(32),
    });
  });

  test("reads Forgejo headers on the Gitea dialect when Gitea's are absent", () => {
    const headers = {
      'X-Forgejo-Event': 'push',
      'X-Forgejo-Event-Type': 'push',
      'X-Forgejo-Delivery': DELIVERY,
      'X-Forgejo-Signature': 'ef'.repeat(32),
    };
    assert.deepEqual(readWebhookHeaders('gitea', headers), {
      event: 'push',
      delivery: DELIVERY,
      signature: 'ef'.repeat(32),
    });
  });

  test("when a delivery carries both, Gitea's names are read and Forgejo's fill only gaps", () => {
    const headers = {
      'x-gitea-event': 'pull_request',
      'x-forgejo-event': 'push',
      'x-gitea-delivery': '',
      'x-forgejo-delivery': DELIVERY,
      'x-gitea-signature': 'cd'.repeat(32),
      'x-forgejo-signature': 'ef'.repeat(32),
    };
    assert.deepEqual(readWebhookHeaders('gitea', headers), {
      event: 'pull_request',
      delivery: DELIVERY,
      signature: 'cd'.repeat(32),
    });
  });

  test('a missing signature is undefined, and so is an empty one', () => {
    const base = { 'x-gitea-event': 'push', 'x-gitea-delivery': DELIVERY };
    assert.equal(readWebhookHeaders('gitea', base).signature, undefined);
    assert.equal(
      readWebhookHeaders('gitea', { ...base, 'x-gitea-signature': '' }).signature,
      undefined,
    );
    assert.equal(
      readWebhookHeaders('gitea', { ...base, 'x-gitea-signature': undefined }).signature,
      undefined,
    );
  });

  test('a missing or empty event or delivery header is a bad request naming the header', () => {
    const cases: [Parameters<typeof readWebhookHeaders>, string][] = [
      [['github', { 'x-github-delivery': DELIVERY }], 'missing X-GitHub-Event header'],
      [['github', { 'x-github-event': 'push' }], 'missing X-GitHub-Delivery header'],
      [
        ['github', { 'x-github-event': ' ', 'x-github-delivery': DELIVERY }],
        'missing X-GitHub-Event header',
      ],
      [
        ['gitea', { 'x-gitea-delivery': DELIVERY }],
        'missing X-Gitea-Event header (or X-Forgejo-Event)',
      ],
      [
        ['gitea', { 'x-gitea-event': 'push', 'x-gitea-delivery': '' }],
        'missing X-Gitea-Delivery header (or X-Forgejo-Delivery)',
      ],
      [
        ['gitea', { 'x-forgejo-event': 'push', 'x-forgejo-delivery': ' ' }],
        'missing X-Gitea-Delivery header (or X-Forgejo-Delivery)',
      ],
      // GitHub's headers do not stand in for Gitea's, nor Forgejo's for GitHub's.
      [
        ['gitea', { 'x-github-event': 'push', 'x-github-delivery': DELIVERY }],
        'missing X-Gitea-Event header (or X-Forgejo-Event)',
      ],
      [
        ['github', { 'x-forgejo-event': 'push', 'x-forgejo-delivery': DELIVERY }],
        'missing X-GitHub-Event header',
      ],
    ];
    for (const [args, message] of cases) {
      assert.throws(
        () => readWebhookHeaders(...args),
        (error) =>
          error instanceof BadRequestError && error.message === message && error.status === 400,
        message,
      );
    }
  });

  test('an absurdly long delivery id is a bad request naming the header it came in', () => {
    assert.throws(
      () =>
        readWebhookHeaders('gitea', {
          'x-forgejo-event': 'push',
          'x-forgejo-delivery': 'x'.repeat(201),
        }),
      (error) =>
        error instanceof BadRequestError &&
        /^X-Forgejo-Delivery header is 201 characters/.test(error.message),
    );
  });

  test('an absurdly long delivery id is a bad request', () => {
    assert.throws(
      () =>
        readWebhookHeaders('github', {
          'x-github-event': 'push',
          'x-github-delivery': 'x'.repeat(201),
        }),
      (error) =>
        error instanceof BadRequestError &&
        /X-GitHub-Delivery header is 201 characters/.test(error.message),
    );
  });
});
