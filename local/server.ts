// The local HTTP server: each request becomes the API Gateway HTTP API (v2)
// event the deployed function would get (raw body preserved, base64-encoded as
// API Gateway does for binary bodies), and the function's result becomes the
// response. Routes go to functions through the same table the deployment uses.
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Context } from 'aws-lambda';
import { type HttpEvent, type HttpResult, withClientGone } from '../lib/http/index.ts';
import { type FunctionName, matchRoute } from '../lib/http/routes.ts';
import { log } from '../lib/log.ts';
import { FORWARDED_HEADERS, TrustedProxies } from './forwarded.ts';

export type HttpHandler = (event: HttpEvent, context: Context) => Promise<HttpResult>;
export type Handlers = Record<FunctionName, HttpHandler>;

// Above every function's own limit, so each answers its own 413.
const MAX_BODY = 16 * 1024 * 1024;

function lambdaContext(fn: string, requestId: string): Context {
  return {
    callbackWaitsForEmptyEventLoop: false,
    functionName: `conductor-${fn}`,
    functionVersion: '$LATEST',
    invokedFunctionArn: `arn:aws:lambda:local:000000000000:function:conductor-${fn}`,
    memoryLimitInMB: '512',
    awsRequestId: requestId,
    logGroupName: `/local/conductor-${fn}`,
    logStreamName: 'local',
    getRemainingTimeInMillis: () => 30_000,
    done: () => {},
    fail: () => {},
    succeed: () => {},
  };
}

async function readBody(req: IncomingMessage): Promise<Buffer | 'too large'> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY) return 'too large';
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

/**
 * The API Gateway v2 event for a request. Forwarded headers count only from
 * a trusted proxy (local/forwarded.ts): then `host` is its X-Forwarded-Host,
 * `x-forwarded-proto` its scheme and `sourceIp` the client it names; from
 * anyone else they are dropped, as API Gateway overwrites them.
 */
export function toEvent(
  req: IncomingMessage,
  body: Buffer,
  requestId: string,
  proxies: TrustedProxies = new TrustedProxies(),
): HttpEvent {
  const url = new URL(req.url ?? '/', 'http://localhost');
  const method = (req.method ?? 'GET').toUpperCase();
  const match = matchRoute(method, url.pathname);
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(req.headers)) {
    if (value !== undefined)
      headers[name.toLowerCase()] = Array.isArray(value) ? value.join(',') : value;
  }
  const forwarded = proxies.weigh(req.socket.remoteAddress, headers);
  for (const name of FORWARDED_HEADERS) delete headers[name];
  if (forwarded.proto) headers['x-forwarded-proto'] = forwarded.proto;
  if (forwarded.host) headers.host = forwarded.host;
  const query: Record<string, string> = {};
  for (const [name, value] of url.searchParams) {
    query[name] = query[name] === undefined ? value : `${query[name]},${value}`;
  }
  const routeKey = match ? `${match.route.method} ${match.route.path}` : '$default';
  const now = new Date();
  return {
    version: '2.0',
    routeKey,
    rawPath: url.pathname,
    rawQueryString: url.search.slice(1),
    headers,
    ...(Object.keys(query).length ? { queryStringParameters: query } : {}),
    ...(match && Object.keys(match.params).length ? { pathParameters: match.params } : {}),
    // API Gateway hands the Cookie header over as this list.
    ...(headers.cookie ? { cookies: headers.cookie.split(/;\s*/).filter(Boolean) } : {}),
    requestContext: {
      accountId: 'local',
      apiId: 'local',
      domainName: headers.host ?? 'localhost',
      domainPrefix: 'local',
      http: {
        method,
        path: url.pathname,
        protocol: `HTTP/${req.httpVersion}`,
        sourceIp: forwarded.client || '127.0.0.1',
        userAgent: headers['user-agent'] ?? '',
      },
      requestId,
      routeKey,
      stage: '$default',
      time: now.toUTCString(),
      timeEpoch: now.getTime(),
    },
    ...(body.length ? { body: body.toString('base64') } : {}),
    isBase64Encoded: body.length > 0,
  };
}

function send(res: ServerResponse, result: HttpResult): void {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(result.headers ?? {})) headers[name] = String(value);
  const body = result.body
    ? Buffer.from(result.body, result.isBase64Encoded ? 'base64' : 'utf8')
    : Buffer.alloc(0);
  const cookies = result.cookies?.length ? { 'set-cookie': result.cookies } : {};
  res.writeHead(result.statusCode ?? 200, {
    ...headers,
    ...cookies,
    'content-length': String(body.length),
  });
  res.end(body);
}

/**
 * Stops a server from `createLocalServer` without waiting on its clients: it
 * takes no new connection, ends the idle ones at once and each busy one as soon
 * as its response is sent, and after `graceMs` ends whatever is left. A plain
 * `server.close()` is not enough: a job page polls every 1.5 s over one
 * keep-alive connection, and a poll in flight at close keeps that connection,
 * and so the server, open for as long as the page stays open.
 */
export async function closeLocalServer(server: Server, graceMs = 5_000): Promise<void> {
  // From now on every response asks its client to close the connection (see
  // createLocalServer), and the connection is ended once it is idle.
  const closed = new Promise<void>((done) => server.close(() => done()));
  server.closeIdleConnections();
  const idle = setInterval(() => server.closeIdleConnections(), 25);
  const force = setTimeout(() => server.closeAllConnections(), graceMs);
  try {
    await closed;
  } finally {
    clearInterval(idle);
    clearTimeout(force);
  }
}

/** Signed storage URLs this server streams itself, past the functions (lib/storage/local.ts). */
export interface BlobRoute {
  prefix: string;
  serve(req: IncomingMessage, res: ServerResponse, token: string): Promise<void>;
}

/** What a request's log line names as its path: a blob's is a signed grant, so not it. */
function loggedPath(path: string, blobs: BlobRoute | undefined): string {
  return blobs && path.startsWith(blobs.prefix) ? `${blobs.prefix}…` : path;
}

/**
 * An HTTP server that serves the functions as API Gateway would. `proxies`:
 * the peers whose forwarded headers count (toEvent). `requestLog`: one line
 * per request when its answer is sent (method, path without its query, which
 * may carry a signed link, status, milliseconds, and the client's address).
 */
export function createLocalServer(
  handlers: Handlers,
  opts: { blobs?: BlobRoute; proxies?: TrustedProxies; requestLog?: boolean } = {},
): Server {
  const proxies = opts.proxies ?? new TrustedProxies();
  const server = createServer(async (req, res) => {
    const requestId = randomUUID();
    if (opts.requestLog) {
      const started = performance.now();
      const xff = req.headers['x-forwarded-for'] ?? '';
      const client = proxies.weigh(req.socket.remoteAddress, {
        'x-forwarded-for': Array.isArray(xff) ? xff.join(',') : xff,
      }).client;
      res.once('finish', () => {
        log('info', 'request', {
          request_id: requestId,
          method: req.method,
          path: loggedPath((req.url ?? '/').split('?')[0] ?? '/', opts.blobs),
          status: res.statusCode,
          ms: Math.round(performance.now() - started),
          client,
        });
      });
    }
    try {
      // Artifact and cache bytes stream between the socket and the disk;
      // they never become an event (a 100 MiB body would be buffered twice).
      const path = (req.url ?? '/').split('?')[0] ?? '/';
      if (opts.blobs && path.startsWith(opts.blobs.prefix)) {
        await opts.blobs.serve(req, res, path.slice(opts.blobs.prefix.length));
        return;
      }
      const body = await readBody(req);
      if (body === 'too large') {
        send(res, {
          statusCode: 413,
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            error: {
              code: 'payload_too_large',
              message: 'the body is too large',
              request_id: requestId,
            },
          }),
        });
        return;
      }
      const event = toEvent(req, body, requestId, proxies);
      const match = matchRoute(event.requestContext.http.method, event.rawPath);
      const fn: FunctionName = match?.route.fn ?? 'api';
      // The client hanging up mid-request (a runner ending its long poll).
      const gone = new AbortController();
      const onClose = () => {
        if (!res.writableFinished) gone.abort();
      };
      res.once('close', onClose);
      const result = await handlers[fn](
        event,
        withClientGone(lambdaContext(fn, requestId), gone.signal),
      );
      // A server being stopped (closeLocalServer) keeps no connection alive.
      if (!server.listening) res.shouldKeepAlive = false;
      send(res, result);
    } catch (err) {
      log('error', 'the local server failed a request', { err, request_id: requestId });
      if (!res.headersSent) {
        send(res, {
          statusCode: 500,
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            error: { code: 'internal', message: 'internal error', request_id: requestId },
          }),
        });
      }
    }
  });
  return server;
}
