// Streams a task's log to the control plane in chunks, each sent at the byte
// offset it starts at. A chunk is only dropped once the control plane has
// acknowledged it, and a retry starts at the same offset, so a retried upload
// is stored once (the control plane keeps only the part past its size).
import type { Masker } from '../lib/masking.ts';
import { Backoff, pause } from './backoff.ts';
import { ConnectionError, HttpStatusError } from './client.ts';

/** Where chunks go: sends `data` at `offset` and answers the stored size. */
export type LogSink = (offset: number, data: string, signal: AbortSignal) => Promise<number>;

export interface LogStreamOptions {
  /** Send what has been written at least this often. */
  flushMs: number;
  /** Send as soon as this much is waiting, and never more in one chunk. */
  chunkBytes: number;
  /** What is masked before anything is sent (lib/masking.ts, the control plane's rule). */
  masker: Masker;
  /** Past this many bytes waiting, `write` answers false until the backlog halves. */
  maxBacklogBytes?: number;
  /** Called for every acknowledged chunk. */
  onSent?: (offset: number, data: string) => void;
  /** Called once when uploading stops for good before the end (a log limit, a lost task). */
  onStopped?: (reason: string) => void;
}

/**
 * Where to end a chunk of at most `max` bytes taken from the start of `buf`:
 * never inside a UTF-8 character, and after a newline when one falls in the
 * second half of the window (whole lines let the control plane mask them too).
 */
export function chunkEnd(buf: Buffer, max: number): number {
  if (buf.length <= max) return buf.length;
  let end = max;
  while (end > 0 && (buf[end]! & 0xc0) === 0x80) end--;
  if (end === 0) return max;
  const newline = buf.lastIndexOf(0x0a, end - 1);
  return newline + 1 >= end / 2 && newline >= 0 ? newline + 1 : end;
}

function conflictSize(body: unknown): number | undefined {
  const b = body as { size?: unknown; error?: { size?: unknown } } | null;
  const size = b?.size ?? b?.error?.size;
  return typeof size === 'number' && Number.isInteger(size) && size >= 0 ? size : undefined;
}

/** One attempt's log on its way to the control plane. */
export class LogStream {
  private text = '';
  private partialSince: number | undefined;
  private out = Buffer.alloc(0);
  private base = 0;
  private closing = false;
  private stopped: string | undefined;
  private pumping: Promise<void> | undefined;
  private again = false;
  private readonly abort = new AbortController();
  private readonly timer: NodeJS.Timeout;
  private drained: Array<() => void> = [];
  private readonly maxBacklog: number;

  constructor(
    private readonly sink: LogSink,
    private readonly opts: LogStreamOptions,
  ) {
    this.maxBacklog = opts.maxBacklogBytes ?? 8 * 1024 * 1024;
    this.timer = setInterval(() => this.kick(), opts.flushMs);
  }

  /** Bytes the control plane has acknowledged. */
  get size(): number {
    return this.base;
  }

  private get backlog(): number {
    return this.out.length + this.text.length;
  }

  /**
   * Queues text for the log. Answers false when the backlog is too large: the
   * caller should stop reading its source until `whenDrained()`.
   */
  write(text: string): boolean {
    if (this.stopped || this.closing || text === '') return true;
    this.text += text;
    if (this.text.endsWith('\n')) this.partialSince = undefined;
    else this.partialSince ??= Date.now();
    if (this.backlog >= this.opts.chunkBytes) this.kick();
    return this.backlog < this.maxBacklog;
  }

  /** Resolves once the backlog has come down to half its limit, or uploading stopped. */
  whenDrained(): Promise<void> {
    if (this.stopped || this.backlog <= this.maxBacklog / 2) return Promise.resolve();
    return new Promise((done) => this.drained.push(done));
  }

  /** Sends everything written so far; gives up on what is left after `timeoutMs`. */
  async close(timeoutMs: number): Promise<void> {
    this.closing = true;
    clearInterval(this.timer);
    const deadline = setTimeout(() => this.abort.abort(), timeoutMs);
    this.kick();
    while (this.pumping) await this.pumping;
    clearTimeout(deadline);
    this.stop(this.abort.signal.aborted ? 'closed before everything was sent' : 'closed', false);
  }

  /** Stops uploading at once (the attempt is no longer ours). */
  cancel(reason: string): void {
    this.stop(reason, false);
    this.abort.abort();
  }

  private stop(reason: string, report: boolean): void {
    if (this.stopped) return;
    this.stopped = reason;
    clearInterval(this.timer);
    if (report) this.opts.onStopped?.(reason);
    for (const done of this.drained.splice(0)) done();
  }

  private kick(): void {
    if (this.stopped) return;
    if (this.pumping) {
      this.again = true;
      return;
    }
    this.pumping = this.pump().finally(() => {
      this.pumping = undefined;
    });
  }

  private async pump(): Promise<void> {
    do {
      this.again = false;
      this.take();
      await this.sendAll();
    } while (this.again && !this.stopped && !this.abort.signal.aborted);
  }

  /** Moves whole lines (and a partial line left waiting a flush interval) to the send buffer, masked. */
  private take(): void {
    if (this.text === '') return;
    let n = this.text.length;
    if (!this.closing) {
      n = this.text.lastIndexOf('\n') + 1;
      const waited = this.partialSince !== undefined && Date.now() - this.partialSince;
      if (
        n < this.text.length &&
        (waited === false ||
          waited >= this.opts.flushMs ||
          this.text.length - n >= this.opts.chunkBytes)
      ) {
        n = this.text.length;
      }
    }
    // A partial line sent now could end with the start of a secret (or of
    // one of its encoded forms) whose rest is still to come: keep that much
    // back for the next time, however many writes the secret comes in.
    if (!this.closing && n > 0 && this.text[n - 1] !== '\n') {
      n -= this.opts.masker.unsafeSuffixLength(this.text.slice(0, n));
      // Never cut a surrogate pair.
      if (n > 0 && /[\uD800-\uDBFF]/.test(this.text[n - 1]!)) n--;
    }
    if (n === 0) return;
    const taken = this.text.slice(0, n);
    this.text = this.text.slice(n);
    if (this.text === '') this.partialSince = undefined;
    const bytes = Buffer.from(this.opts.masker.mask(taken), 'utf8');
    this.out = this.out.length ? Buffer.concat([this.out, bytes]) : bytes;
  }

  private async sendAll(): Promise<void> {
    const backoff = new Backoff(250, 5_000);
    while (!this.stopped && !this.abort.signal.aborted) {
      if (this.closing) this.take();
      if (this.out.length === 0) return;
      const end = chunkEnd(this.out, this.opts.chunkBytes);
      const chunk = this.out.subarray(0, end);
      const offset = this.base;
      try {
        const size = await this.sink(offset, chunk.toString('utf8'), this.abort.signal);
        // The control plane holds at least this chunk now; anything it says it
        // holds beyond that came from an earlier, longer try of the same bytes.
        const acked = Math.min(Math.max(size, offset + end), offset + this.out.length);
        this.advance(acked - offset);
        backoff.reset();
        this.opts.onSent?.(offset, chunk.toString('utf8'));
      } catch (err) {
        if (this.abort.signal.aborted) return;
        if (err instanceof HttpStatusError && err.status === 409) {
          const size = conflictSize(err.body);
          if (size !== undefined) {
            if (size >= offset) this.advance(Math.min(size - offset, this.out.length));
            // The control plane holds fewer bytes than it acknowledged: those
            // cannot be sent again, so go on from its size.
            else this.base = size;
            continue;
          }
          // No size: the lease is in question, or the control plane lost a
          // race of its own. The heartbeat decides about the lease; retry.
        } else if (err instanceof HttpStatusError && !err.retryable) {
          this.stop(
            err.status === 413
              ? 'the log reached the control plane limit; the rest was not uploaded'
              : `the control plane refused a log chunk: ${err.message}`,
            true,
          );
          return;
        } else if (!(err instanceof ConnectionError) && !(err instanceof HttpStatusError)) {
          this.stop(`uploading the log failed: ${err instanceof Error ? err.message : err}`, true);
          return;
        }
        await pause(backoff.next(), this.abort.signal);
      }
    }
  }

  private advance(bytes: number): void {
    this.out = this.out.subarray(bytes);
    this.base += bytes;
    if (this.drained.length && this.backlog <= this.maxBacklog / 2) {
      for (const done of this.drained.splice(0)) done();
    }
  }
}
