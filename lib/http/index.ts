// The HTTP side of every function: API Gateway HTTP API (v2) events in,
// structured results out, with one error shape for the whole contract.
import { randomUUID } from 'node:crypto';
import { gzipSync } from 'node:zlib';
import { injectLambdaContext } from '@aws-lambda-powertools/logger/middleware';
import middy, { type MiddlewareObj } from '@middy/core';
import type {
  APIGatewayProxyEventV2,
  APIGatewayProxyStructuredResultV2,
  Context,
} from 'aws-lambda';
import { sqlState } from '../db/sqlstate.ts';
import { asUnavailable, unavailability } from '../db/unavailable.ts';
import {
  AppError,
  BadRequestError,
  NotFoundError,
  PayloadTooLargeError,
  RETRY_AFTER_S,
  UnavailableError,
  ValidationError,
  type ValidationIssue,
} from '../errors.ts';
import { log, logger, withRequestId } from '../log.ts';
import * as z from '../zod.ts';

// SQLSTATE class 22 codes a request's own value can cause.
const DATA_EXCEPTIONS = new Set(['22001', '22003', '22021', '22P02', '22P05', '22007', '22008']);

export type HttpEvent = APIGatewayProxyEventV2;
export type HttpResult = APIGatewayProxyStructuredResultV2;

/** What a handler answers: JSON `body`, plain `text` or an `html` page, with a status. */
export interface Reply {
  status: number;
  body?: unknown;
  text?: string;
  html?: string;
  headers?: Record<string, string>;
  /** `Set-Cookie` values (API Gateway v2 sends each as a header of its own). */
  cookies?: string[];
}

/** The request body as the client sent it (API Gateway base64-encodes some bodies). */
export function rawBody(event: HttpEvent): Buffer {
  if (event.body === undefined || event.body === null) return Buffer.alloc(0);
  return event.isBase64Encoded
    ? Buffer.from(event.body, 'base64')
    : Buffer.from(event.body, 'utf8');
}

/** Turns zod issues into validation issues whose paths name the fields. */
export function zodIssues(error: z.core.$ZodError, prefix = ''): ValidationIssue[] {
  return error.issues.map((issue) => {
    const path = issue.path.map(String).join('.');
    const full = [prefix, path].filter(Boolean).join('.');
    let message = issue.message;
    if (issue.code === 'invalid_type' && /received undefined$/.test(issue.message)) {
      message = 'is required';
    } else if (issue.code === 'unrecognized_keys') {
      message = `unknown field${issue.keys.length > 1 ? 's' : ''} ${issue.keys.map((k) => `"${k}"`).join(', ')}`;
    }
    return { path: full || (prefix ? prefix : 'body'), message };
  });
}

/** Parses the JSON body against a schema; anything else is a 400 naming the field. */
export function jsonBody<S extends z.core.$ZodType>(event: HttpEvent, schema: S): z.infer<S> {
  const raw = rawBody(event);
  let value: unknown;
  if (raw.length === 0) {
    value = {};
  } else {
    try {
      value = JSON.parse(raw.toString('utf8'));
    } catch {
      throw new BadRequestError('the body is not valid JSON');
    }
  }
  const nul = findNul(value);
  if (nul !== undefined) {
    throw new ValidationError([
      { path: nul || 'body', message: 'must not contain a NUL character' },
    ]);
  }
  const parsed = z.safeParse(schema, value);
  if (!parsed.success) throw new ValidationError(zodIssues(parsed.error));
  return parsed.data;
}

/**
 * The path of the first string (or key) in a JSON value that holds a NUL
 * character, which PostgreSQL text cannot store; undefined when there is none.
 */
export function findNul(value: unknown, path = ''): string | undefined {
  if (typeof value === 'string') return value.includes('\u0000') ? path : undefined;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = findNul(value[i], path ? `${path}.${i}` : String(i));
      if (found !== undefined) return found;
    }
    return undefined;
  }
  if (value !== null && typeof value === 'object') {
    for (const [key, item] of Object.entries(value)) {
      const here = path ? `${path}.${key}` : key;
      if (key.includes('\u0000')) return here;
      const found = findNul(item, here);
      if (found !== undefined) return found;
    }
  }
  return undefined;
}

/** Parses the query string against a schema; a bad value is a 400 naming the parameter. */
export function queryParams<S extends z.core.$ZodType>(event: HttpEvent, schema: S): z.infer<S> {
  const parsed = z.safeParse(schema, event.queryStringParameters ?? {});
  if (!parsed.success) throw new ValidationError(zodIssues(parsed.error));
  return parsed.data;
}

/** A path parameter; the route guarantees it is there. */
export function pathParam(event: HttpEvent, name: string): string {
  const value = event.pathParameters?.[name];
  if (value === undefined) throw new NotFoundError(`no ${name} in the path`);
  // Nothing stored can have a NUL in its name, so it cannot exist.
  if (value.includes('\u0000')) throw new NotFoundError(`no ${name} with a NUL character exists`);
  return value;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** A path parameter that must be a UUID: anything else cannot exist, so it is a 404. */
export function idParam(event: HttpEvent, name: string, what: string): string {
  const value = pathParam(event, name);
  if (!UUID.test(value)) throw new NotFoundError(`${what} ${value} does not exist`);
  return value.toLowerCase();
}

/** The bearer token of the Authorization header, if any. */
export function bearerToken(event: HttpEvent): string | undefined {
  const header = event.headers?.authorization ?? event.headers?.Authorization;
  const match = header ? /^Bearer\s+(\S+)\s*$/i.exec(header) : null;
  return match?.[1];
}

/** A header by case-insensitive name. */
export function header(event: HttpEvent, name: string): string | undefined {
  const wanted = name.toLowerCase();
  for (const [key, value] of Object.entries(event.headers ?? {})) {
    if (key.toLowerCase() === wanted) return value;
  }
  return undefined;
}

function requestIdOf(event: HttpEvent): string {
  return event.requestContext?.requestId ?? randomUUID();
}

function errorReply(err: unknown, requestId: string): HttpResult {
  let status = 500;
  let code = 'internal';
  let message = 'internal error';
  let extra: Record<string, unknown> = {};
  let details: Record<string, unknown> = {};
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    'x-request-id': requestId,
  };
  // An error the domain raised on purpose answers as itself; anything else
  // that passes (a lock or statement timeout, a lost or silent connection, a
  // conflict past its retries) is a 503 the runner retries, never a 500.
  const unavailable =
    err instanceof AppError && err.expose && !(err instanceof UnavailableError)
      ? undefined
      : asUnavailable(err);
  if (unavailable) {
    // Nothing about the request was wrong; sent again it gets a fresh
    // connection, a fresh snapshot, and locks that have likely moved on.
    log('warn', 'request answered unavailable', { err, cause_kind: unavailability(err) });
    status = 503;
    code = unavailable.code;
    message = unavailable.message;
    headers['retry-after'] = String(unavailable.retryAfterS);
  } else if (err instanceof AppError && err.expose) {
    status = err.status;
    code = err.code;
    message = err.message;
    if (err instanceof ValidationError) extra = { issues: err.issues };
    details = err.details ?? {};
  } else if (DATA_EXCEPTIONS.has(sqlState(err) ?? '')) {
    // A value the validation let through but PostgreSQL cannot take: still
    // the client's input, so a 400, logged so the validation can be tightened.
    log('warn', 'the database refused a value from a request', { err });
    status = 400;
    code = 'bad_request';
    message = 'a value in the request is out of range or not valid text';
  } else {
    log('error', 'request failed', { err });
  }
  return {
    statusCode: status,
    headers,
    // Details go beside the error too, where a client reads them (`size` of a
    // log conflict).
    body: JSON.stringify({
      ...details,
      error: { code, message, request_id: requestId, ...extra, ...details },
    }),
  };
}

// Pages of a thousand tasks are mostly repeated markup: gzip makes them a
// tenth of the size (level 1: within 4% of level 6 here, in two thirds of the
// time). Smaller answers are not worth the CPU.
const GZIP_MIN_BYTES = 8 * 1024;

function toResult(reply: Reply, requestId: string, acceptEncoding = ''): HttpResult {
  const headers: Record<string, string> = { 'x-request-id': requestId, ...reply.headers };
  const cookies = reply.cookies?.length ? { cookies: reply.cookies } : {};
  if (reply.html !== undefined) {
    const type = { 'content-type': 'text/html; charset=utf-8', vary: 'accept-encoding' };
    if (reply.html.length >= GZIP_MIN_BYTES && /\bgzip\b/.test(acceptEncoding)) {
      return {
        statusCode: reply.status,
        headers: { ...type, 'content-encoding': 'gzip', ...headers },
        ...cookies,
        body: gzipSync(reply.html, { level: 1 }).toString('base64'),
        isBase64Encoded: true,
      };
    }
    return {
      statusCode: reply.status,
      headers: { ...type, ...headers },
      ...cookies,
      body: reply.html,
    };
  }
  if (reply.text !== undefined) {
    return {
      statusCode: reply.status,
      headers: { 'content-type': 'text/plain; charset=utf-8', ...headers },
      ...cookies,
      body: reply.text,
    };
  }
  if (reply.body === undefined) return { statusCode: reply.status, headers, ...cookies, body: '' };
  return {
    statusCode: reply.status,
    headers: { 'content-type': 'application/json', ...headers },
    ...cookies,
    body: JSON.stringify(reply.body),
  };
}

/**
 * The middleware every HTTP function uses: a body size limit (413 before
 * anything else reads it), the reply turned into an API Gateway result, and
 * every error into the contract's error shape (an unexpected one is logged and
 * answered 500 with nothing from its message).
 */
export function httpMiddleware(opts: {
  maxBodyBytes: number;
}): MiddlewareObj<HttpEvent, HttpResult> {
  return {
    name: 'conductor-http',
    before: (request) => {
      const body = request.event.body;
      if (body) {
        const bytes = Buffer.byteLength(body, request.event.isBase64Encoded ? 'base64' : 'utf8');
        if (bytes > opts.maxBodyBytes) {
          throw new PayloadTooLargeError(`the body is over ${opts.maxBodyBytes} bytes`);
        }
      }
    },
    after: (request) => {
      request.response = toResult(
        request.response as unknown as Reply,
        requestIdOf(request.event),
        header(request.event, 'accept-encoding'),
      );
    },
    onError: (request) => {
      request.response = errorReply(request.error, requestIdOf(request.event));
    },
  };
}

const CLIENT_GONE = Symbol.for('conductor.clientGone');

/**
 * Marks a (local) request's context with a signal that aborts when its client
 * hangs up before the answer: a long poll stops waiting for nobody.
 */
export function withClientGone<C extends object>(context: C, signal: AbortSignal): C {
  Object.defineProperty(context, CLIENT_GONE, { value: signal });
  return context;
}

/** The signal withClientGone put on the context; undefined in Lambda. */
export function clientGone(context: unknown): AbortSignal | undefined {
  if (typeof context !== 'object' || context === null) return undefined;
  return (context as { [CLIENT_GONE]?: AbortSignal })[CLIENT_GONE];
}

/** Wraps a handler main into a Lambda handler for HTTP API events. */
export function httpFunction(
  main: (event: HttpEvent) => Promise<Reply>,
  opts: { maxBodyBytes: number } = { maxBodyBytes: 1024 * 1024 },
): (event: HttpEvent, context: Context) => Promise<HttpResult> {
  // In Lambda, a request that is about to run out of time (a hung query, a
  // database that does not answer) ends 1.5 s early as a JSON 503 with a log
  // line, instead of a bare Lambda timeout the client sees as a 502/504.
  // The local server's context has no deadline, so middy watches none there.
  const handler = middy<HttpEvent, HttpResult>({
    timeoutEarlyInMillis: 1_500,
    timeoutEarlyResponse: () => {
      throw new UnavailableError('the request ran out of time; try again', {
        retryAfterS: RETRY_AFTER_S.silent,
      });
    },
  })
    .use(injectLambdaContext(logger))
    .use(httpMiddleware(opts))
    .handler(main as unknown as (event: HttpEvent) => Promise<HttpResult>);
  return (event, context) => {
    // One id for the whole request: the log lines and the error body agree.
    const requestId = requestIdOf(event);
    event.requestContext = { ...event.requestContext, requestId };
    return withRequestId(requestId, () => handler(event, context));
  };
}
