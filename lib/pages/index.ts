// The web pages' routes (shared/api-contract.md, "Web pages"), served by the
// api function beside the JSON API: who may read each page, sign-in and out,
// and the forms that act on a job (which go through the admin routes' own
// code, handed in as `act`).
import { createHash, timingSafeEqual } from 'node:crypto';
import { z } from 'zod';
import type { AppContext } from '../context.ts';
import { AppError, NotFoundError } from '../errors.ts';
import {
  type HttpEvent,
  header,
  pathParam,
  queryParams,
  type Reply,
  rawBody,
} from '../http/index.ts';
import { readLog } from '../scheduler/task-log.ts';
import {
  csrfToken,
  newSession,
  readSession,
  SESSION_COOKIE,
  type Session,
  sessionCookie,
  verifyCsrf,
  verifyJobLink,
} from './access.ts';
import { CLIENT_SCRIPT } from './client.ts';
import { earlierLog, liveJob, logSource, renderJobPage, type Viewer } from './job.ts';
import {
  projectVisibility,
  renderError,
  renderHome,
  renderLogin,
  renderProject,
  VISIBILITY_SQL,
} from './lists.ts';

/** What a page form asks of a job, answered by the admin route of the same name. */
export type JobAction = (
  action: 'cancel' | 'rerun' | 'approve',
  jobId: string,
  body: Record<string, unknown>,
  event: HttpEvent,
  ctx: AppContext,
) => Promise<Reply>;

type PageRoute = (event: HttpEvent, ctx: AppContext, act: JobAction) => Promise<Reply>;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const SCRIPT_HASH = createHash('sha256').update(CLIENT_SCRIPT).digest('base64');
// Only the page's own script runs (by its hash); styles are inline (ansi_up
// colours with style attributes); nothing is framed or loaded from elsewhere.
const HEADERS = {
  'cache-control': 'no-store',
  'content-security-policy': `default-src 'none'; script-src 'sha256-${SCRIPT_HASH}'; style-src 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'`,
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'same-origin',
};

const htmlReply = (status: number, text: string, extra: Partial<Reply> = {}): Reply => ({
  status,
  html: text,
  ...extra,
  headers: { ...HEADERS, ...extra.headers },
});
const redirect = (location: string, cookies?: string[]): Reply => ({
  status: location.startsWith('/login') ? 302 : 303,
  headers: { location, 'cache-control': 'no-store' },
  ...(cookies ? { cookies } : {}),
});

function cookie(event: HttpEvent, name: string): string | undefined {
  const list = event.cookies ?? (header(event, 'cookie') ?? '').split(/;\s*/);
  for (const item of list) {
    const at = item.indexOf('=');
    if (at > 0 && item.slice(0, at).trim() === name) return item.slice(at + 1).trim();
  }
  return undefined;
}

function sessionOf(event: HttpEvent, ctx: AppContext): Session | null {
  return readSession(ctx.keyring, ctx.adminToken, cookie(event, SESSION_COOKIE));
}

function viewerOf(ctx: AppContext, session: Session | null): Viewer {
  return session ? { signedIn: true, csrf: csrfToken(ctx.keyring, session) } : { signedIn: false };
}

function form(event: HttpEvent): URLSearchParams {
  return new URLSearchParams(rawBody(event).toString('utf8'));
}

// Any origin will do: a path resolved against it must stay on it.
const SITE = 'https://conductor.invalid';
// Control characters, any kind of space or invisible format character, and
// backslashes: browsers drop tabs and line breaks from a URL and read `\` as
// `/`, so `/\tevil.example` and `/\evil.example` both reach `//evil.example`.
const UNSAFE_IN_NEXT = /[\p{Cc}\p{Cf}\p{Z}\\]/u;

/**
 * A single `/` first, and nothing a browser would drop or read as a `/`,
 * before or after percent-decoding (a server or proxy on the way may decode
 * again): twice decoded at most, a third layer is refused.
 */
function pathShaped(path: string): boolean {
  let text = path;
  for (let i = 0; i < 3; i++) {
    if (!/^\/(?![/\\])/.test(text) || UNSAFE_IN_NEXT.test(text)) return false;
    let once: string;
    try {
      once = decodeURIComponent(text);
    } catch {
      return false;
    }
    if (once === text) return true;
    text = once;
  }
  return false;
}

/**
 * Where to go after signing in: a path of this site, else `/`. The path is
 * resolved against the site and must stay on it, and what is answered (the
 * resolved path) is checked again: `/../..//x` resolves to `//x`.
 */
export function safeNext(next: string | null | undefined): string {
  if (!next || next.length > 2048 || !pathShaped(next)) return '/';
  let url: URL;
  try {
    url = new URL(next, SITE);
  } catch {
    return '/';
  }
  const path = `${url.pathname}${url.search}${url.hash}`;
  return url.origin === SITE && pathShaped(path) ? path : '/';
}

function here(event: HttpEvent): string {
  return event.rawQueryString ? `${event.rawPath}?${event.rawQueryString}` : event.rawPath;
}

const toLogin = (event: HttpEvent) => redirect(`/login?next=${encodeURIComponent(here(event))}`);

/**
 * Who may read the job of the path: a session; a valid signed link (its
 * `sig`); anyone, when the job's project is public. Otherwise a 403 for a
 * `sig` that is not valid, and a redirect to sign in: both the same whether
 * or not the job exists.
 */
async function jobAccess(
  event: HttpEvent,
  ctx: AppContext,
): Promise<{ jobId: string; viewer: Viewer } | Reply> {
  const raw = pathParam(event, 'id');
  const jobId = UUID.test(raw) ? raw.toLowerCase() : null;
  const session = sessionOf(event, ctx);
  if (session) {
    if (!jobId) throw new NotFoundError(`job ${raw} does not exist`);
    return { jobId, viewer: viewerOf(ctx, session) };
  }
  const sig = event.queryStringParameters?.sig;
  if (jobId && sig !== undefined && verifyJobLink(ctx.keyring, jobId, sig)) {
    return { jobId, viewer: { signedIn: false, sig } };
  }
  if (jobId) {
    const { rows } = await ctx.pool.query<{ visibility: string }>(
      `select ${VISIBILITY_SQL} as visibility from jobs j join projects p on p.id = j.project_id
        where j.id = $1`,
      [jobId],
    );
    if (rows[0]?.visibility === 'public') return { jobId, viewer: { signedIn: false } };
  }
  if (sig !== undefined) {
    return htmlReply(
      403,
      renderError(403, 'This link is not valid, or it has expired.', { signedIn: false }),
    );
  }
  return toLogin(event);
}

/** Errors of a page as a page: the status and message a person can read. */
function asPage(route: PageRoute): PageRoute {
  return async (event, ctx, act) => {
    try {
      return await route(event, ctx, act);
    } catch (err) {
      if (!(err instanceof AppError) || !err.expose) throw err;
      const viewer = viewerOf(ctx, sessionOf(event, ctx));
      return htmlReply(err.status, renderError(err.status, err.message, viewer));
    }
  };
}

const JobPageQuery = z.object({
  task: z.string().regex(UUID, 'must be a task id').optional(),
  attempt: z.coerce.number().int().min(1).max(2_147_483_647).optional(),
  sig: z.string().optional(),
});
const LiveQuery = z.object({
  task: z.string().regex(UUID, 'must be a task id').optional(),
  // 0: the task had not started when the page was drawn.
  attempt: z.coerce
    .number()
    .int()
    .min(0)
    .max(2_147_483_647)
    .optional()
    .transform((a) => (a ? a : undefined)),
  from: z.coerce.number().int().min(0).max(Number.MAX_SAFE_INTEGER).optional(),
  line: z.coerce.number().int().min(1).max(Number.MAX_SAFE_INTEGER).optional(),
  sig: z.string().optional(),
});
const LogQuery = z.object({
  task: z.string().regex(UUID, 'must be a task id'),
  attempt: z.coerce.number().int().min(1).max(2_147_483_647),
  before: z.coerce.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
  sig: z.string().optional(),
});
const RawQuery = z.object({
  task: z.string().regex(UUID, 'must be a task id'),
  attempt: z.coerce.number().int().min(1).max(2_147_483_647).optional(),
  offset: z.coerce.number().int().min(0).max(Number.MAX_SAFE_INTEGER).default(0),
  sig: z.string().optional(),
});
const ProjectQuery = z.object({
  before: z.coerce.number().int().min(1).max(2_147_483_647).optional(),
});

const adminTokenIs = (given: string, adminToken: string) =>
  timingSafeEqual(
    createHash('sha256').update(given).digest(),
    createHash('sha256').update(adminToken).digest(),
  );

/** A job form: a session and its CSRF token, then the admin route's own code. */
function jobForm(action: 'cancel' | 'rerun' | 'approve'): PageRoute {
  return asPage(async (event, ctx, act) => {
    const session = sessionOf(event, ctx);
    const jobId = pathParam(event, 'id');
    if (!session) return toLogin(event);
    const fields = form(event);
    const viewer = viewerOf(ctx, session);
    if (!verifyCsrf(ctx.keyring, session, fields.get('csrf') ?? undefined)) {
      return htmlReply(
        403,
        renderError(
          403,
          'The form was stale or not sent from this site: reload the page and try again.',
          viewer,
        ),
      );
    }
    if (!UUID.test(jobId)) throw new NotFoundError(`job ${jobId} does not exist`);
    const body = action === 'rerun' ? { failed_only: fields.get('failed_only') === 'true' } : {};
    const reply = await act(action, jobId.toLowerCase(), body, event, ctx);
    const created = (reply.body as { job_id?: string } | undefined)?.job_id;
    return redirect(`/jobs/${created ?? jobId.toLowerCase()}`);
  });
}

/** Every page route by its route key (lib/http/routes.ts). */
export const PAGE_ROUTES: Record<string, PageRoute> = {
  'GET /': asPage(async (event, ctx) => {
    const viewer = viewerOf(ctx, sessionOf(event, ctx));
    return htmlReply(200, await renderHome(ctx.pool, viewer));
  }),
  'GET /projects/{id}': asPage(async (event, ctx) => {
    const id = pathParam(event, 'id');
    const session = sessionOf(event, ctx);
    if (!session && (await projectVisibility(ctx.pool, id)) !== 'public') return toLogin(event);
    const { before } = queryParams(event, ProjectQuery);
    return htmlReply(200, await renderProject(ctx.pool, id, viewerOf(ctx, session), before));
  }),
  'GET /jobs/{id}': asPage(async (event, ctx) => {
    const access = await jobAccess(event, ctx);
    if (!('jobId' in access)) return access;
    const query = queryParams(event, JobPageQuery);
    return htmlReply(200, await renderJobPage(ctx.pool, access.jobId, access.viewer, query));
  }),
  'GET /jobs/{id}/live': async (event, ctx) => {
    const access = await jobAccess(event, ctx);
    if (!('jobId' in access)) return access;
    const query = queryParams(event, LiveQuery);
    return {
      status: 200,
      body: await liveJob(ctx.pool, access.jobId, access.viewer, query),
      headers: { 'cache-control': 'no-store' },
    };
  },
  'GET /jobs/{id}/log': async (event, ctx) => {
    const access = await jobAccess(event, ctx);
    if (!('jobId' in access)) return access;
    const q = queryParams(event, LogQuery);
    return {
      status: 200,
      body: await earlierLog(ctx.pool, access.jobId, q.task, q.attempt, q.before),
      headers: { 'cache-control': 'no-store' },
    };
  },
  'GET /jobs/{id}/raw': async (event, ctx) => {
    const access = await jobAccess(event, ctx);
    if (!('jobId' in access)) return access;
    const q = queryParams(event, RawQuery);
    const source = await logSource(ctx.pool, access.jobId, q.task);
    const log = await readLog(ctx.pool, source, q.attempt, q.offset);
    return {
      status: 200,
      text: log.text,
      headers: {
        'cache-control': 'no-store',
        'x-content-type-options': 'nosniff',
        'x-log-attempt': String(log.attempt),
        'x-log-size': String(log.size),
        'x-log-end': String(log.end),
      },
    };
  },
  'POST /jobs/{id}/cancel': jobForm('cancel'),
  'POST /jobs/{id}/rerun': jobForm('rerun'),
  'POST /jobs/{id}/approve': jobForm('approve'),
  'GET /login': asPage(async (event, ctx) => {
    const next = safeNext(event.queryStringParameters?.next);
    if (sessionOf(event, ctx)) return redirect(next);
    return htmlReply(200, renderLogin({ next, signedIn: false }));
  }),
  'POST /login': asPage(async (event, ctx) => {
    const fields = form(event);
    const next = safeNext(fields.get('next'));
    const token = fields.get('token') ?? '';
    if (!token || !adminTokenIs(token, ctx.adminToken)) {
      return htmlReply(
        401,
        renderLogin({ next, signedIn: false, error: 'That is not the admin token.' }),
      );
    }
    const session = newSession(ctx.keyring, ctx.adminToken);
    return redirect(next, [sessionCookie(session.value, header(event, 'host'))]);
  }),
  'POST /logout': asPage(async (event, ctx) => {
    const session = sessionOf(event, ctx);
    if (session && !verifyCsrf(ctx.keyring, session, form(event).get('csrf') ?? undefined)) {
      return htmlReply(
        403,
        renderError(
          403,
          'The form was stale: reload the page and try again.',
          viewerOf(ctx, session),
        ),
      );
    }
    return redirect('/', [sessionCookie(null, header(event, 'host'))]);
  }),
};
