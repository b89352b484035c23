// The claims a container has seen the database accept: a worker token (its
// hash) with the labels it asked for. Only such a claim is answered "nothing
// to claim" from a closed gate without the database; any other goes to the
// database, which answers 401 or 400 as the contract says.

// Long, because each entry that runs out costs a database wake while idle. A
// token revoked meanwhile still gets 204 (never a task) from a closed gate
// until then; the first claim that reaches the database answers it 401.
const KEEP_MS = 12 * 3600_000;
const MAX_ENTRIES = 1_000;

/** A bounded set of accepted (token hash, labels) pairs, each kept for 12 hours. */
export class KnownClaimers {
  readonly #seen = new Map<string, number>();
  readonly #keepMs: number;
  constructor(keepMs = KEEP_MS) {
    this.#keepMs = keepMs;
  }
  static key(tokenHash: Buffer, labels: readonly string[] | undefined): string {
    return `${tokenHash.toString('base64')} ${labels ? JSON.stringify([...labels].sort()) : '*'}`;
  }
  has(key: string, now = Date.now()): boolean {
    const at = this.#seen.get(key);
    return at !== undefined && now - at < this.#keepMs;
  }
  remember(key: string, now = Date.now()): void {
    this.#seen.delete(key);
    this.#seen.set(key, now);
    // Map keeps insertion order: the first key is the oldest.
    if (this.#seen.size > MAX_ENTRIES) this.#seen.delete(this.#seen.keys().next().value!);
  }
}
