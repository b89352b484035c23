import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { signBody, verifySignature } from '../../lib/forge/webhook.ts';
import { giteaPush } from './fixtures/gitea.ts';
import { githubPullRequest } from './fixtures/github.ts';

// The test vector GitHub publishes in "Validating webhook deliveries".
const DOC_SECRET = "It's a Secret to Everybody";
const DOC_BODY = Buffer.from('Hello, World!');
const DOC_HEX = '757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17';

const flipLastHexDigit = (hex: string) => hex.slice(0, -1) + (hex.endsWith('0') ? '1' : '0');

describe('GitHub signatures (X-Hub-Signature-256)', () => {
  test("GitHub's documented test vector verifies and is what signBody computes", () => {
    assert.equal(verifySignature('github', DOC_BODY, DOC_SECRET, `sha256=${DOC_HEX}`), true);
    assert.equal(signBody('github', DOC_BODY, DOC_SECRET), `sha256=${DOC_HEX}`);
  });

  test('a wrong secret fails', () => {
    assert.equal(
      verifySignature('github', DOC_BODY, "It's a secret to everybody", `sha256=${DOC_HEX}`),
      false,
    );
  });

  test('one flipped byte in the body fails', () => {
    const body = Buffer.from(DOC_BODY);
    body[0] = (body[0] ?? 0) ^ 0x01;
    assert.equal(verifySignature('github', body, DOC_SECRET, `sha256=${DOC_HEX}`), false);
  });

  test('a missing, truncated, altered or garbled header fails', () => {
    const headers = [
      undefined,
      '',
      `sha256=${DOC_HEX.slice(0, -2)}`,
      `sha256=${DOC_HEX}00`,
      `sha256=${flipLastHexDigit(DOC_HEX)}`,
      DOC_HEX, // Gitea's form: GitHub's header needs the prefix
      `sha1=${DOC_HEX}`,
      `SHA256=${DOC_HEX}`,
      `sha256=${'z'.repeat(64)}`,
      'sha256=',
      `sha256= ${DOC_HEX}`,
      `sha256=${DOC_HEX},sha256=${DOC_HEX}`,
    ];
    for (const header of headers) {
      assert.equal(verifySignature('github', DOC_BODY, DOC_SECRET, header), false, String(header));
    }
  });

  test('upper-case hex digits are the same digest and verify', () => {
    assert.equal(
      verifySignature('github', DOC_BODY, DOC_SECRET, `sha256=${DOC_HEX.toUpperCase()}`),
      true,
    );
  });

  test('an empty secret never verifies, even against its own HMAC', () => {
    const header = signBody('github', DOC_BODY, '');
    assert.equal(verifySignature('github', DOC_BODY, '', header), false);
  });
});

describe('Gitea signatures (X-Gitea-Signature)', () => {
  test('the same HMAC-SHA256 as GitHub, as bare hex', () => {
    assert.equal(verifySignature('gitea', DOC_BODY, DOC_SECRET, DOC_HEX), true);
    assert.equal(signBody('gitea', DOC_BODY, DOC_SECRET), DOC_HEX);
  });

  test('a wrong secret, a changed body or a bad header fails', () => {
    const body = Buffer.from(DOC_BODY);
    body[body.length - 1] = (body[body.length - 1] ?? 0) ^ 0x80;
    assert.equal(verifySignature('gitea', body, DOC_SECRET, DOC_HEX), false);
    assert.equal(verifySignature('gitea', DOC_BODY, 'another secret', DOC_HEX), false);
    for (const header of [
      undefined,
      '',
      DOC_HEX.slice(0, 63),
      flipLastHexDigit(DOC_HEX),
      `sha256=${DOC_HEX}`, // GitHub's form
      'not a signature',
    ]) {
      assert.equal(verifySignature('gitea', DOC_BODY, DOC_SECRET, header), false, String(header));
    }
  });
});

describe('signBody', () => {
  test('round-trips real payload bodies on both forges, byte for byte', () => {
    const secret = 'whsec_4f1b0c9e2d7a';
    const bodies = [
      Buffer.from(JSON.stringify(githubPullRequest('opened'), null, 2)),
      // Non-ASCII text: the HMAC covers the UTF-8 bytes as sent.
      Buffer.from(JSON.stringify({ ...giteaPush(), note: 'Überfahrt ⚓ 潮汐' })),
      Buffer.alloc(0),
    ];
    for (const body of bodies) {
      for (const forge of ['github', 'gitea'] as const) {
        const header = signBody(forge, body, secret);
        assert.equal(verifySignature(forge, body, secret, header), true);
        assert.equal(
          verifySignature(forge, Buffer.concat([body, Buffer.from(' ')]), secret, header),
          false,
        );
      }
    }
  });
});
