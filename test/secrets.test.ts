import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  decrypt,
  encrypt,
  generateKey,
  keyId,
  needsRotation,
  parseKeyring,
  SecretDecryptError,
} from '../lib/secrets.ts';

const keyA = generateKey();
const keyB = generateKey();

test('a sealed value opens with the same keyring and context', () => {
  const ring = parseKeyring(keyA);
  const sealed = encrypt(ring, 'hunter2 ✓', 'project/demo/secret/TOKEN');
  assert.ok(!sealed.includes('hunter2'));
  assert.equal(decrypt(ring, sealed, 'project/demo/secret/TOKEN'), 'hunter2 ✓');
});

test('sealing the same value twice gives different ciphertexts', () => {
  const ring = parseKeyring(keyA);
  assert.notEqual(encrypt(ring, 'same'), encrypt(ring, 'same'));
});

test('each ciphertext names the key that sealed it', () => {
  const ring = parseKeyring(keyA);
  assert.equal(encrypt(ring, 'x').split('.')[1], keyId(Buffer.from(keyA, 'base64')));
});

test('a tampered ciphertext, tag or iv fails to open', () => {
  const ring = parseKeyring(keyA);
  const sealed = encrypt(ring, 'a secret value');
  const parts = sealed.split('.');
  for (const i of [2, 3, 4]) {
    const bytes = Buffer.from(parts[i]!, 'base64url');
    bytes[0]! ^= 1;
    const tampered = [...parts];
    tampered[i] = bytes.toString('base64url');
    assert.throws(() => decrypt(ring, tampered.join('.')), SecretDecryptError, `part ${i}`);
  }
});

test('a value sealed for one place does not open in another', () => {
  const ring = parseKeyring(keyA);
  const sealed = encrypt(ring, 'v', 'project/a/secret/X');
  assert.throws(() => decrypt(ring, sealed, 'project/b/secret/X'), SecretDecryptError);
});

test('a wrong key fails to open and says which key is missing', () => {
  const sealed = encrypt(parseKeyring(keyA), 'v');
  assert.throws(
    () => decrypt(parseKeyring(keyB), sealed),
    (err: unknown) =>
      err instanceof SecretDecryptError &&
      err.message.includes(keyId(Buffer.from(keyA, 'base64'))) &&
      err.message.includes('not configured'),
  );
});

test('relabelling a ciphertext with another configured key id fails to open', () => {
  const ring = parseKeyring(`${keyA},${keyB}`);
  const sealed = encrypt(ring, 'v').split('.');
  sealed[1] = keyId(Buffer.from(keyB, 'base64'));
  assert.throws(() => decrypt(ring, sealed.join('.')), SecretDecryptError);
});

test('after rotation old values still open and new ones use the new key', () => {
  const old = parseKeyring(keyA);
  const sealedOld = encrypt(old, 'before rotation');
  const rotated = parseKeyring(`${keyB},${keyA}`);
  assert.equal(decrypt(rotated, sealedOld), 'before rotation');
  assert.ok(needsRotation(rotated, sealedOld));
  const resealed = encrypt(rotated, decrypt(rotated, sealedOld));
  assert.ok(!needsRotation(rotated, resealed));
  assert.throws(() => decrypt(old, resealed), SecretDecryptError);
});

test('keys are 32 bytes given as hex or base64, anything else is refused', () => {
  const hex = Buffer.from(keyA, 'base64').toString('hex');
  assert.equal(parseKeyring(hex).primaryId, parseKeyring(keyA).primaryId);
  assert.throws(() => parseKeyring('c2hvcnQ='), /must be 32 bytes/);
  assert.throws(() => parseKeyring(' , '), /no secret key/);
});

test('garbage is refused as not sealed', () => {
  const ring = parseKeyring(keyA);
  for (const bad of ['', 'plain text', 'v2.a.b.c.d', 'v1.x.y']) {
    assert.throws(() => decrypt(ring, bad), SecretDecryptError);
  }
});
