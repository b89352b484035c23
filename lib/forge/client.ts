// The one way the control plane calls a forge's API (GitHub's, Gitea's,
// GitLab's): the timeout, the size cap, the address it may connect to,
// redirects, and one reading of the answer (ok, permanent, retryable,
// rate-limited). The forge module (lib/forge/<name>/) says the URL and the
// headers (forgeCall); every operation in lib/forge/ goes through callForge.
//
// A forge URL is an admin's setting, but what it names is resolved at call
// time, and the control plane runs where a request to 127.0.0.1 or
// 169.254.169.254 reaches things no forge should (the instance metadata
// service hands out credentials). So every call resolves the host, refuses it
// if any of its addresses is loopback, private, link-local or otherwise not
// public, and connects to the address it checked: a name that resolves to a
// public address for the check and a private one for the connection (DNS
// rebinding) cannot get past, because no second lookup is made. Redirects are
// not followed: one would carry the token wherever the answer points.
import { lookup } from 'node:dns/promises';
import type { IncomingMessage, RequestOptions } from 'node:http';
import { BlockList, isIP, type LookupFunction } from 'node:net';
import type { Forge, ForgeRequest } from './forge.ts';

export const DEFAULT_TIMEOUT_MS = 10_000;

/** Raised when the forge could not be reached or answered 5xx/429: the caller retries later. */
export class ForgeUnavailableError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'ForgeUnavailableError';
  }
}

/**
 * The control plane will not make (or finish) this call: the host resolves to
 * an address it may not reach, or the forge answered with a redirect. No retry
 * changes that; the message names the URL.
 */
export class ForgeRefusedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ForgeRefusedError';
  }
}

/** The call failed on the network: before an answer came (`connect`), or while its body was read. */
export class ForgeTransportError extends Error {
  readonly phase: 'connect' | 'body';
  constructor(phase: 'connect' | 'body', cause: unknown) {
    super(cause instanceof Error ? cause.message : String(cause), { cause });
    this.name = 'ForgeTransportError';
    this.phase = phase;
  }
}

let privateAllowed = false;

/**
 * Lets calls reach loopback, private and link-local addresses
 * (CONDUCTOR_ALLOW_PRIVATE_FORGES=1: the tests' fake forges, a Gitea on this
 * machine). Set once from the configuration where the context is built.
 */
export function allowPrivateForges(on: boolean): void {
  privateAllowed = on;
}

/** How an answer is to be taken, the same for every call. */
export type AnswerKind = 'ok' | 'permanent' | 'retryable' | 'rate_limited';

/**
 * 2xx is ok. 429, and a 403 that says the rate limit is spent
 * (`x-ratelimit-remaining: 0` or `retry-after`, as GitHub signals it), are a
 * wait; 408 and 5xx may pass; any other answer is the forge refusing this
 * request for good (a bad token, no such repository or commit).
 */
export function classifyAnswer(status: number, headers: Headers): AnswerKind {
  if (status >= 200 && status < 300) return 'ok';
  if (
    status === 429 ||
    (status === 403 && (headers.get('x-ratelimit-remaining') === '0' || headers.has('retry-after')))
  ) {
    return 'rate_limited';
  }
  if (status === 408 || status >= 500) return 'retryable';
  return 'permanent';
}

export interface ForgeCall {
  method?: 'GET' | 'POST' | 'PATCH' | 'DELETE';
  url: string;
  headers: Record<string, string>;
  body?: string;
  /** For the whole call, the name lookup and the body included. Default 10 s. */
  timeoutMs?: number;
  /** A body longer than this is not read: the answer's `body` is null. Default 1 MiB. */
  maxBytes?: number;
}

export interface ForgeAnswer {
  status: number;
  headers: Headers;
  kind: AnswerKind;
  /** The body; null when it was longer than `maxBytes`. */
  body: Buffer | null;
}

/** A forge module's request as a call: its URL, method, JSON body, and the forge's headers for the token. */
export function forgeCall(
  forge: Forge,
  token: string | null,
  req: ForgeRequest,
  opts: { timeoutMs?: number; maxBytes?: number } = {},
): ForgeCall {
  const headers = forge.headers(token, req.accept);
  if (req.body !== undefined) headers['Content-Type'] = 'application/json';
  return {
    method: req.method ?? 'GET',
    url: req.url,
    headers,
    ...(req.body === undefined ? {} : { body: JSON.stringify(req.body) }),
    ...opts,
  };
}

const REDIRECTS = new Set([301, 302, 303, 307, 308]);

/**
 * Calls the forge: resolves the host and refuses a non-public address
 * (ForgeRefusedError) unless private forges are allowed, connects to the
 * address it checked, and reads the answer within the timeout. A redirect is
 * a ForgeRefusedError naming the URL; a network failure or the timeout a
 * ForgeTransportError; any other answer is returned with its kind.
 */
export async function callForge(call: ForgeCall): Promise<ForgeAnswer> {
  const url = new URL(call.url);
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new ForgeRefusedError(`${call.url} is not an http(s) URL`);
  }
  const timeoutMs = call.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const signal = AbortSignal.timeout(timeoutMs);
  const address = await checkedAddress(url, call.url, signal);
  const answer = await send(url, address, call, signal);
  if (REDIRECTS.has(answer.status)) {
    const to = answer.headers.get('location');
    throw new ForgeRefusedError(
      `${call.url} answered HTTP ${answer.status}, a redirect${to ? ` to ${to}` : ''}: forge requests do not follow redirects (check the URL)`,
    );
  }
  return answer;
}

/**
 * Why a call to `url` would be refused for its address (the message callForge
 * would raise), or null when it would not be, or when the name does not
 * resolve now (a call later finds out). For settings checked when saved.
 */
export async function refusedAddress(url: string, timeoutMs = 5_000): Promise<string | null> {
  try {
    await checkedAddress(new URL(url), url, AbortSignal.timeout(timeoutMs));
    return null;
  } catch (err) {
    return err instanceof ForgeRefusedError ? err.message : null;
  }
}

/** What went wrong with a call on the network, in words: the cause, or the timeout. */
export function transportErrorText(error: unknown, timeoutMs: number): string {
  const cause = error instanceof ForgeTransportError ? error.cause : error;
  if (cause instanceof Error && cause.name === 'TimeoutError') {
    return `no answer within ${timeoutMs} ms`;
  }
  return cause instanceof Error ? cause.message : String(cause);
}

interface Address {
  address: string;
  family: 4 | 6;
}

/** The address to connect to for `url`: its host's first, once every one has passed the check. */
async function checkedAddress(url: URL, named: string, signal: AbortSignal): Promise<Address> {
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
  let addresses: Address[];
  const literal = isIP(host);
  if (literal !== 0) {
    addresses = [{ address: host, family: literal === 6 ? 6 : 4 }];
  } else {
    try {
      const found = await Promise.race([
        lookup(host, { all: true, verbatim: true }),
        new Promise<never>((_, fail) => {
          if (signal.aborted) fail(signal.reason);
          signal.addEventListener('abort', () => fail(signal.reason), { once: true });
        }),
      ]);
      addresses = found.map((a) => ({ address: a.address, family: a.family === 6 ? 6 : 4 }));
    } catch (err) {
      throw new ForgeTransportError('connect', err);
    }
  }
  if (!privateAllowed) {
    const refused = addresses.find((a) => !isPublic(a));
    if (refused) {
      const what =
        host === refused.address ? host : `${host} resolves to ${refused.address}, which`;
      throw new ForgeRefusedError(
        `refused to call ${named}: ${what} is not a public address (loopback, private or link-local); CONDUCTOR_ALLOW_PRIVATE_FORGES=1 allows it`,
      );
    }
  }
  const first = addresses[0];
  if (!first) throw new ForgeTransportError('connect', new Error(`${host} has no address`));
  return first;
}

// Every range that is not the public internet: this host, private networks,
// carrier-grade NAT, link-local (the cloud metadata services), multicast and
// reserved space, and the IPv6 forms of all of these.
const NOT_PUBLIC = new BlockList();
for (const [net, prefix] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.0.2.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
] as const) {
  NOT_PUBLIC.addSubnet(net, prefix, 'ipv4');
}
for (const [net, prefix] of [
  // Unspecified, loopback and the deprecated IPv4-compatible addresses.
  ['::', 96],
  ['64:ff9b:1::', 48],
  ['100::', 64],
  ['2001:db8::', 32],
  ['fc00::', 7],
  ['fe80::', 10],
  ['fec0::', 10],
  ['ff00::', 8],
] as const) {
  NOT_PUBLIC.addSubnet(net, prefix, 'ipv6');
}

/** The IPv4 address an IPv6 address carries (mapped, compatible, NAT64, 6to4), if it carries one. */
function embeddedIpv4(address: string): string | null {
  const lower = address.toLowerCase();
  const dotted = /^(?:::ffff:|::|64:ff9b::)(\d+\.\d+\.\d+\.\d+)$/.exec(lower);
  if (dotted) return dotted[1]!;
  const hex = /^(?:::ffff:|64:ff9b::)([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(lower);
  const sixToFour = /^2002:([0-9a-f]{1,4}):([0-9a-f]{1,4}):/.exec(lower);
  const pair = hex ?? sixToFour;
  if (!pair) return null;
  const hi = Number.parseInt(pair[1]!, 16);
  const lo = Number.parseInt(pair[2]!, 16);
  return [hi >> 8, hi & 255, lo >> 8, lo & 255].join('.');
}

function isPublic(a: Address): boolean {
  if (a.family === 4) return !NOT_PUBLIC.check(a.address, 'ipv4');
  const v4 = embeddedIpv4(a.address);
  if (v4 !== null) return !NOT_PUBLIC.check(v4, 'ipv4');
  return !NOT_PUBLIC.check(a.address, 'ipv6');
}

/**
 * node:http and node:https, loaded at the first call: on Node 22 (Lambda's
 * nodejs22.x) importing node:http loads Node's fetch (undici) with it, 60 to
 * 80 ms of CPU that a cold start would pay before its first event whether or
 * not the request calls a forge (issue #56, docs/architecture.md "Bundles").
 */
type Request = typeof import('node:http').request;
let transports: Promise<{ http: Request; https: Request }> | undefined;
const loadTransports = () =>
  (transports ??= Promise.all([import('node:http'), import('node:https')]).then(([h, s]) => ({
    http: h.request,
    https: s.request as Request,
  })));

async function send(
  url: URL,
  address: Address,
  call: ForgeCall,
  signal: AbortSignal,
): Promise<ForgeAnswer> {
  const { http: httpRequest, https: httpsRequest } = await loadTransports();
  const maxBytes = call.maxBytes ?? 1024 * 1024;
  // The connection goes to the address checked above, whatever the name
  // resolves to by now; TLS still checks the certificate against the name.
  const pinned: LookupFunction = (_host, opts, done) => {
    if (opts.all) done(null, [address]);
    else done(null, address.address, address.family);
  };
  const options: RequestOptions = {
    method: call.method ?? 'GET',
    headers: {
      ...call.headers,
      ...(call.body === undefined
        ? {}
        : { 'Content-Length': String(Buffer.byteLength(call.body)) }),
    },
    lookup: pinned,
    // A connection of its own per call: forge calls are few, and a pooled
    // socket would outlive the check that let it be opened.
    agent: false,
  };
  return new Promise((resolve, reject) => {
    let phase: 'connect' | 'body' = 'connect';
    let res: IncomingMessage | undefined;
    // Destroying the request or the answer emits events of its own: the
    // first outcome is the one that counts.
    let settled = false;
    const fail = (err: unknown) => {
      if (settled) return;
      settled = true;
      signal.removeEventListener('abort', onAbort);
      reject(new ForgeTransportError(phase, err));
      req.destroy();
      res?.destroy();
    };
    const onAbort = () => fail(signal.reason);
    const req = (url.protocol === 'https:' ? httpsRequest : httpRequest)(url, options, (answer) => {
      res = answer;
      phase = 'body';
      const headers = new Headers();
      for (const [name, value] of Object.entries(answer.headers)) {
        if (value !== undefined) headers.set(name, Array.isArray(value) ? value.join(', ') : value);
      }
      const status = answer.statusCode ?? 0;
      const done = (body: Buffer | null) => {
        if (settled) return;
        settled = true;
        signal.removeEventListener('abort', onAbort);
        resolve({ status, headers, kind: classifyAnswer(status, headers), body });
      };
      // Nothing but the status and headers of a redirect is used.
      if (REDIRECTS.has(status) || Number(headers.get('content-length')) > maxBytes) {
        done(REDIRECTS.has(status) ? Buffer.alloc(0) : null);
        answer.destroy();
        return;
      }
      const chunks: Buffer[] = [];
      let total = 0;
      answer.on('data', (chunk: Buffer) => {
        total += chunk.length;
        if (total > maxBytes) {
          done(null);
          answer.destroy();
          return;
        }
        chunks.push(chunk);
      });
      answer.on('end', () => done(Buffer.concat(chunks)));
      answer.on('error', fail);
      answer.on('aborted', () => fail(new Error('the forge broke off its answer')));
    });
    req.on('error', fail);
    if (signal.aborted) {
      onAbort();
      return;
    }
    signal.addEventListener('abort', onAbort, { once: true });
    req.end(call.body);
  });
}
