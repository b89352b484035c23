import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';

// Values at rest (project secrets, webhook secrets, forge tokens) are sealed with
// AES-256-GCM. Each ciphertext names the key that sealed it, so a new key can be
// put first in the keyring while older ones still open what they sealed.
//
//   v1.<key id>.<iv>.<tag>.<ciphertext>     (the last three base64url)
//
// The version, key id and an optional context (say "project/demo/secret/TOKEN")
// are authenticated as additional data: a ciphertext moved to another row or
// relabelled with another key id fails to open.

const VERSION = 'v1';
const IV_BYTES = 12;
const TAG_BYTES = 16;
const KEY_BYTES = 32;

export interface Keyring {
  /** Id of the key that seals new values. */
  readonly primaryId: string;
  readonly keys: ReadonlyMap<string, Buffer>;
}

/** Raised when a value cannot be opened: tampered, sealed for another context, or under a key not in the keyring. */
export class SecretDecryptError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'SecretDecryptError';
  }
}

/** A short stable id for a key, derived from it so it needs no bookkeeping. */
export function keyId(key: Buffer): string {
  return createHash('sha256').update('conductor key id\0').update(key).digest('hex').slice(0, 12);
}

/** A new random key, base64-encoded, for CONDUCTOR_SECRET_KEY. */
export function generateKey(): string {
  return randomBytes(KEY_BYTES).toString('base64');
}

function decodeKey(text: string): Buffer {
  const t = text.trim();
  const key = /^[0-9a-fA-F]{64}$/.test(t) ? Buffer.from(t, 'hex') : Buffer.from(t, 'base64');
  if (key.length !== KEY_BYTES) {
    throw new Error(`a secret key must be ${KEY_BYTES} bytes, as 64 hex digits or base64`);
  }
  return key;
}

/** A keyring from a comma-separated list of keys: the first seals, all of them open. */
export function parseKeyring(spec: string): Keyring {
  const parts = spec
    .split(',')
    .map((p) => p.trim())
    .filter((p) => p.length > 0);
  if (parts.length === 0) throw new Error('no secret key given');
  const keys = new Map<string, Buffer>();
  for (const part of parts) {
    const key = decodeKey(part);
    keys.set(keyId(key), key);
  }
  return { primaryId: keyId(decodeKey(parts[0]!)), keys };
}

function aad(kid: string, context: string): Buffer {
  return Buffer.from(`${VERSION}\0${kid}\0${context}`, 'utf8');
}

/** Seals `plaintext` with the keyring's primary key, bound to `context`. */
export function encrypt(keyring: Keyring, plaintext: string, context = ''): string {
  const key = keyring.keys.get(keyring.primaryId);
  if (!key) throw new Error('the keyring has no primary key');
  const iv = randomBytes(IV_BYTES);
  const cipher = createCipheriv('aes-256-gcm', key, iv);
  cipher.setAAD(aad(keyring.primaryId, context));
  const body = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
  return [
    VERSION,
    keyring.primaryId,
    iv.toString('base64url'),
    cipher.getAuthTag().toString('base64url'),
    body.toString('base64url'),
  ].join('.');
}

/** Opens a value sealed by `encrypt` with any key of the keyring; the context must match. */
export function decrypt(keyring: Keyring, sealed: string, context = ''): string {
  const parts = sealed.split('.');
  if (parts.length !== 5 || parts[0] !== VERSION) {
    throw new SecretDecryptError('not a sealed value of a known version');
  }
  const [, kid, ivText, tagText, bodyText] = parts as [string, string, string, string, string];
  const key = keyring.keys.get(kid);
  if (!key) {
    throw new SecretDecryptError(`the value was sealed with key ${kid}, which is not configured`);
  }
  const iv = Buffer.from(ivText, 'base64url');
  const tag = Buffer.from(tagText, 'base64url');
  if (iv.length !== IV_BYTES || tag.length !== TAG_BYTES) {
    throw new SecretDecryptError('the sealed value is malformed');
  }
  try {
    const decipher = createDecipheriv('aes-256-gcm', key, iv, { authTagLength: TAG_BYTES });
    decipher.setAAD(aad(kid, context));
    decipher.setAuthTag(tag);
    return Buffer.concat([
      decipher.update(Buffer.from(bodyText, 'base64url')),
      decipher.final(),
    ]).toString('utf8');
  } catch (err) {
    throw new SecretDecryptError(
      'the sealed value failed authentication (tampered, or sealed for another place)',
      {
        cause: err,
      },
    );
  }
}

/** True when the value was sealed by a key other than the primary one and should be sealed again. */
export function needsRotation(keyring: Keyring, sealed: string): boolean {
  return sealed.split('.')[1] !== keyring.primaryId;
}
