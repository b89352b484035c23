// The hash constructor the AWS SDK's SignatureV4 takes, over node:crypto, so
// tests can compare our hand-made signatures with the SDK's own.
import { createHash, createHmac } from 'node:crypto';

const bytes = (d: string | ArrayBuffer | ArrayBufferView): string | Uint8Array =>
  typeof d === 'string'
    ? d
    : d instanceof ArrayBuffer
      ? new Uint8Array(d)
      : new Uint8Array(d.buffer, d.byteOffset, d.byteLength);

/** SHA-256, or HMAC-SHA-256 with a secret, in the SDK's Checksum shape. */
export class Sha256 {
  #h;
  constructor(secret?: string | ArrayBuffer | ArrayBufferView) {
    this.#h = secret ? createHmac('sha256', bytes(secret)) : createHash('sha256');
  }
  update(data: string | ArrayBuffer | ArrayBufferView) {
    this.#h.update(bytes(data));
  }
  async digest() {
    return new Uint8Array(this.#h.digest());
  }
}
