// The runner's side of the HTTP contract: one method per runner route, each
// call bounded by a timeout. Calls that may be repeated safely can retry
// connection failures and 5xx answers with backoff for a while.
import { randomBytes } from 'node:crypto';
import { Backoff, pause } from './backoff.ts';
import {
  ClaimAnswerSchema,
  CompleteAnswerSchema,
  type Completion,
  HeartbeatAnswerSchema,
  LogAnswerSchema,
  type Task,
  TaskSchema,
} from './protocol.ts';

/** The control plane answered with a status other than 2xx. */
export class HttpStatusError extends Error {
  readonly status: number;
  readonly body: unknown;
  /** The wait the control plane asked for (`Retry-After`, in seconds), in ms. */
  readonly retryAfterMs: number | undefined;
  constructor(method: string, path: string, status: number, body: unknown, retryAfterMs?: number) {
    const detail = (body as { error?: { message?: unknown } } | null)?.error?.message;
    super(`${method} ${path}: HTTP ${status}${typeof detail === 'string' ? `: ${detail}` : ''}`);
    this.name = 'HttpStatusError';
    this.status = status;
    this.body = body;
    this.retryAfterMs = retryAfterMs;
  }
  /** A server-side failure or overload: the same call may succeed later. */
  get retryable(): boolean {
    return this.status >= 500 || this.status === 429;
  }
}

/** The call got no answer: connection refused or reset, a DNS failure, or the timeout. */
export class ConnectionError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'ConnectionError';
  }
}

/** True for failures worth trying again: no answer, or a 5xx/429. */
export function isRetryable(err: unknown): boolean {
  return err instanceof ConnectionError || (err instanceof HttpStatusError && err.retryable);
}

/**
 * The wait before retrying after `err`: what `Retry-After` asked for, kept
 * within the backoff's bounds, or else the backoff's next delay.
 */
export function retryDelay(err: unknown, backoff: Backoff): number {
  const asked = err instanceof HttpStatusError ? err.retryAfterMs : undefined;
  const next = backoff.next();
  return asked === undefined ? next : backoff.clamp(asked);
}

/** `Retry-After` in seconds, as ms; an HTTP date or anything else is ignored. */
export function parseRetryAfter(value: string | null): number | undefined {
  if (value === null || !/^\s*\d+\s*$/.test(value)) return undefined;
  return Number(value) * 1000;
}

/** A fresh `Idempotency-Key` for a new claim (the contract allows up to 200 characters). */
export function newClaimKey(): string {
  return randomBytes(24).toString('base64url');
}

/** The claimed task could not be read; it is held under `lease_id` all the same. */
export class MalformedTaskError extends Error {
  readonly taskId: string | undefined;
  readonly leaseId: string | undefined;
  constructor(message: string, raw: unknown) {
    super(message);
    this.name = 'MalformedTaskError';
    const r = raw as { id?: unknown; lease_id?: unknown } | null;
    this.taskId = typeof r?.id === 'string' ? r.id : undefined;
    this.leaseId = typeof r?.lease_id === 'string' ? r.lease_id : undefined;
  }
}

export interface ClientOptions {
  url: string;
  token: string;
  /** How long one HTTP call may take. */
  timeoutMs: number;
  fetch?: typeof fetch;
}

export interface CallOptions {
  /** Sent as the `Idempotency-Key` header. */
  idempotencyKey?: string;
  /** Keep retrying connection failures and 5xx answers for this long (0: one try). */
  retryForMs?: number;
  /** Overrides the client's timeout for this call. */
  timeoutMs?: number;
  /** Stops the call and its retries. */
  signal?: AbortSignal;
  /** More request headers. */
  headers?: Record<string, string>;
}

/** A claim's options: a call's, and the long poll's wait. */
export interface ClaimOptions extends CallOptions {
  /**
   * Asks the control plane to wait up to this many seconds for a task
   * (`?wait=N`); the call's timeout grows by as much. One that offers no
   * long poll answers at once.
   */
  waitS?: number;
  /** Asks for the push channel (`Conductor-Channel: want`); its offer is kept in `channelOffer`. */
  wantChannel?: boolean;
}

/** Where the push channel is and the ticket that opens it (a claim's 204 offers them on AWS). */
export interface ChannelOffer {
  url: string;
  ticket: string;
}

export interface Answer {
  status: number;
  body: unknown;
  headers?: Headers;
  /** The server's clock when it answered (the Date header), in ms since the epoch. */
  serverTime: number | undefined;
}

export interface HeartbeatAnswer {
  leaseExpiresAt: number;
  cancel: boolean;
  serverTime: number | undefined;
}

/** A client of the runner routes for one worker token. */
export class RunnerClient {
  readonly url: string;
  private readonly token: string;
  private readonly timeoutMs: number;
  private readonly doFetch: typeof fetch;
  /** The push channel the last empty claim offered, if it did. */
  channelOffer: ChannelOffer | undefined;

  constructor(opts: ClientOptions) {
    this.url = opts.url.replace(/\/+$/, '');
    this.token = opts.token;
    this.timeoutMs = opts.timeoutMs;
    this.doFetch = opts.fetch ?? fetch;
  }

  /**
   * Claims one task; null when nothing is claimable (204). A claim whose
   * answer did not arrive is repeated with the same `idempotencyKey`, so that
   * a claim the control plane granted is answered again, not granted twice.
   */
  async claim(
    labels: string[] | undefined,
    opts: ClaimOptions = {},
  ): Promise<{ task: Task; serverTime: number | undefined } | null> {
    const { waitS = 0, wantChannel, ...call } = opts;
    const answer = await this.post(
      waitS > 0 ? `/v1/runner/claim?wait=${waitS}` : '/v1/runner/claim',
      labels ? { labels } : {},
      {
        ...(waitS > 0
          ? { ...call, timeoutMs: (call.timeoutMs ?? this.timeoutMs) + waitS * 1000 }
          : call),
        ...(wantChannel ? { headers: { 'conductor-channel': 'want' } } : {}),
      },
    );
    if (answer.status === 204) {
      const url = answer.headers?.get('conductor-channel-url');
      const ticket = answer.headers?.get('conductor-channel-ticket');
      this.channelOffer = url && ticket ? { url, ticket } : undefined;
      return null;
    }
    const raw = ClaimAnswerSchema.safeParse(answer.body);
    const parsed = TaskSchema.safeParse(raw.success ? raw.data.task : undefined);
    if (!parsed.success) {
      throw new MalformedTaskError(
        `the claimed task does not have the expected shape: ${parsed.error.issues
          .map((i) => `${i.path.join('.')}: ${i.message}`)
          .join('; ')}`,
        raw.success ? raw.data.task : undefined,
      );
    }
    return { task: parsed.data, serverTime: answer.serverTime };
  }

  /** Extends the lease; answers when it now expires and whether the job was cancelled. */
  async heartbeat(
    taskId: string,
    leaseId: string,
    opts: CallOptions = {},
  ): Promise<HeartbeatAnswer> {
    const answer = await this.post(
      `/v1/runner/tasks/${encodeURIComponent(taskId)}/heartbeat`,
      { lease_id: leaseId },
      opts,
    );
    const body = HeartbeatAnswerSchema.parse(answer.body);
    return {
      leaseExpiresAt: Date.parse(body.lease_expires_at),
      cancel: body.cancel,
      serverTime: answer.serverTime,
    };
  }

  /** Appends a log chunk at `offset`; answers the stored size. */
  async appendLog(
    taskId: string,
    leaseId: string,
    offset: number,
    data: string,
    opts: CallOptions = {},
  ): Promise<number> {
    const answer = await this.post(
      `/v1/runner/tasks/${encodeURIComponent(taskId)}/logs`,
      { lease_id: leaseId, offset, data },
      opts,
    );
    return LogAnswerSchema.parse(answer.body).size;
  }

  /** Reports the outcome of the attempt; answers the task's state and the job's final state. */
  async complete(
    taskId: string,
    completion: Completion,
    opts: CallOptions = {},
  ): Promise<{ state: string; job_state: string | null }> {
    const answer = await this.post(
      `/v1/runner/tasks/${encodeURIComponent(taskId)}/complete`,
      completion,
      opts,
    );
    return CompleteAnswerSchema.parse(answer.body);
  }

  /** POSTs JSON; throws HttpStatusError for a non-2xx answer and ConnectionError for none. */
  async post(path: string, body: unknown, opts: CallOptions = {}): Promise<Answer> {
    const until = Date.now() + (opts.retryForMs ?? 0);
    const backoff = new Backoff(250, 5_000);
    for (;;) {
      try {
        return await this.once(path, body, opts);
      } catch (err) {
        const wait = retryDelay(err, backoff);
        if (!isRetryable(err) || opts.signal?.aborted || Date.now() + wait > until) throw err;
        await pause(wait, opts.signal);
        if (opts.signal?.aborted) throw err;
      }
    }
  }

  private async once(path: string, body: unknown, opts: CallOptions): Promise<Answer> {
    // Messages name the route, not its query (a long poll's `?wait=N`).
    const route = path.split('?')[0]!;
    const timeout = AbortSignal.timeout(opts.timeoutMs ?? this.timeoutMs);
    const signal = opts.signal ? AbortSignal.any([timeout, opts.signal]) : timeout;
    let res: Response;
    let text: string;
    try {
      res = await this.doFetch(`${this.url}${path}`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${this.token}`,
          'content-type': 'application/json',
          ...(opts.idempotencyKey ? { 'idempotency-key': opts.idempotencyKey } : {}),
          ...opts.headers,
        },
        body: JSON.stringify(body),
        signal,
      });
      // Reading the body can fail too (a connection reset mid-answer), and is
      // under the same timeout.
      text = await res.text();
    } catch (err) {
      const why = timeout.aborted
        ? `timed out after ${opts.timeoutMs ?? this.timeoutMs} ms`
        : describe(err);
      throw new ConnectionError(`POST ${route}: ${why}`, { cause: err });
    }
    let parsed: unknown = null;
    if (text) {
      try {
        parsed = JSON.parse(text);
      } catch {
        parsed = text;
      }
    }
    if (res.status < 200 || res.status > 299) {
      throw new HttpStatusError(
        'POST',
        route,
        res.status,
        parsed,
        parseRetryAfter(res.headers.get('retry-after')),
      );
    }
    const date = res.headers.get('date');
    const serverTime = date ? Date.parse(date) : Number.NaN;
    return {
      status: res.status,
      body: parsed,
      headers: res.headers,
      serverTime: Number.isNaN(serverTime) ? undefined : serverTime,
    };
  }
}

function describe(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const cause = err.cause instanceof Error ? `: ${err.cause.message}` : '';
  return `${err.message}${cause}`;
}
