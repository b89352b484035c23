// The web pages' routes (shared/api-contract.md, "Web pages"), served by the
// api function beside the JSON API: who may read each page, sign-in and out,
// and the forms that act on a job (which go through the admin routes' own
// code, handed in as `act`).
import { createHash, timingSafeEqual } from 'node:crypto';
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
import {
  createSession,
  endSession,
  findSession,
  finishSignIn,
  forgeName,
  type PeopleGate,
  type Person,
  purgeEndedSessions,
  SignInError,
  STATE_COOKIE,
  startSignIn,
} from '../people/index.ts';
import { stampPage } from '../scheduler/log-times.ts';
import { readLog } from '../scheduler/task-log.ts';
import { DOWNLOAD_URL_TTL_S, jobArtifacts, storeFor } from '../storage/index.ts';
import * as z from '../zod.ts';
import {
  csrfToken,
  newSession,
  openSignIn,
  readSession,
  SESSION_COOKIE,
  type Session,
  sealSignIn,
  sessionCookie,
  siteOrigin,
  verifyCsrf,
  verifyJobLink,
} from './access.ts';
import { badgeReply } from './badge.ts';
import { CLIENT_SCRIPT } from './client.ts';
import { type Html, html, page } from './html.ts';
import { earlierLog, liveJob, logSource, renderJobPage, type Viewer } from './job.ts';
import {
  projectVisibility,
  renderError,
  renderHome,
  renderLogin,
  renderProject,
  VISIBILITY_SQL,
} from './lists.ts';
import { renderSignedIn, signInCookie } from './login.ts';
import { renderBadgeSection, renderRunForm, renderSchedules } from './run.ts';

/**
 * What a page form asks of a job, answered by the admin route of the same
 * name, done and audited as `by` (the signed-in person).
 */
export type JobAction = (
  // `run`: a manual run of the project whose id is `jobId` (the Run form).
  action: 'cancel' | 'rerun' | 'approve' | 'unblock' | 'run',
  jobId: string,
  body: Record<string, unknown>,
  event: HttpEvent,
  ctx: AppContext,
  by?: Person,
) => Promise<Reply>;

/** A page route; `people` (lib/app/people.ts) says what a signed-in person may do. */
type PageRoute = (
  event: HttpEvent,
  ctx: AppContext,
  act: JobAction,
  people: PeopleGate,
) => Promise<Reply>;

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

export const htmlReply = (status: number, text: string, extra: Partial<Reply> = {}): Reply => ({
  status,
  html: text,
  ...extra,
  headers: { ...HEADERS, ...extra.headers },
});
export const redirect = (location: string, cookies?: string[]): Reply => ({
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

/**
 * A session cookie this server signed, not expired: said without the
 * database (the idle gate's pages). Whether it is still open (not signed out)
 * and who it is, is signedInAs's: use that for anything but the idle page.
 */
function sessionOf(event: HttpEvent, ctx: AppContext): Session | null {
  return readSession(ctx.keyring, ctx.adminToken, cookie(event, SESSION_COOKIE));
}

/** The open session of the request and its person (a row in PostgreSQL), or null. */
export async function signedInAs(
  event: HttpEvent,
  ctx: AppContext,
): Promise<{ session: Session; person: Person } | null> {
  const session = sessionOf(event, ctx);
  if (!session) return null;
  const person = await findSession(ctx.pool, session.id);
  return person ? { session, person } : null;
}

/**
 * A refusal as a page: 403 with the reason, 503 when the forge did not
 * answer, or, for a person who may not even view the project, the same 404
 * as for a project (or, with `jobId`, a job) that does not exist.
 */
export function refused(
  status: 403 | 404 | 503,
  reason: string,
  viewer: Viewer,
  jobId?: string,
): Reply {
  if (status === 404) {
    throw new NotFoundError(jobId ? `job ${jobId} does not exist` : reason);
  }
  return htmlReply(status, renderError(status, reason, viewer), {
    ...(status === 503 ? { headers: { 'retry-after': '5' } } : {}),
  });
}

export function viewerOf(ctx: AppContext, session: Session | null): Viewer {
  return session ? { signedIn: true, csrf: csrfToken(ctx.keyring, session) } : { signedIn: false };
}

export function form(event: HttpEvent): URLSearchParams {
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

/**
 * Where the forge sends a person back: under CONDUCTOR_PUBLIC_URL, else the
 * host the request came to (http on loopback, else https, as API Gateway
 * serves it).
 */
function callbackUrl(event: HttpEvent, ctx: AppContext, forge: string): string {
  return `${origin(event, ctx)}/login/${forge}/callback`;
}

/** This site's origin (lib/pages/access.ts, siteOrigin). */
export function origin(event: HttpEvent, ctx: AppContext): string {
  return siteOrigin(
    ctx.config.CONDUCTOR_PUBLIC_URL,
    header(event, 'host') ?? event.requestContext?.domainName,
    header(event, 'x-forwarded-proto'),
  );
}

/** Whether this site's cookies are `Secure`: its origin is https. */
function secure(event: HttpEvent, ctx: AppContext): boolean {
  return origin(event, ctx).startsWith('https:');
}

function here(event: HttpEvent): string {
  return event.rawQueryString ? `${event.rawPath}?${event.rawQueryString}` : event.rawPath;
}

export const toLogin = (event: HttpEvent) =>
  redirect(`/login?next=${encodeURIComponent(here(event))}`);

/**
 * Who may read the job of the path: a session; a valid signed link (its
 * `sig`); anyone, when the job's project is public. Otherwise a 403 for a
 * `sig` that is not valid, and a redirect to sign in: both the same whether
 * or not the job exists.
 */
async function jobAccess(
  event: HttpEvent,
  ctx: AppContext,
  people: PeopleGate,
): Promise<{ jobId: string; viewer: Viewer } | Reply> {
  const raw = pathParam(event, 'id');
  const jobId = UUID.test(raw) ? raw.toLowerCase() : null;
  const who = await signedInAs(event, ctx);
  if (who) {
    if (!jobId) throw new NotFoundError(`job ${raw} does not exist`);
    const viewer = viewerOf(ctx, who.session);
    if (who.person.kind === 'forge') {
      const decision = await people.may(ctx, who.person, await projectOfJob(ctx, jobId), 'view');
      if (!decision.allowed) {
        // The forge refused (or did not answer): the link of a commit status
        // still opens its job's page, as it does signed out.
        const sig = event.queryStringParameters?.sig;
        if (sig !== undefined && verifyJobLink(ctx.keyring, jobId, sig)) {
          return { jobId, viewer: { ...viewer, sig } };
        }
        return refused(decision.status, decision.reason, viewer, jobId);
      }
    }
    return { jobId, viewer };
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

/** The project a job belongs to; a 404 when there is no such job. */
export async function projectOfJob(ctx: AppContext, jobId: string): Promise<string> {
  const { rows } = await ctx.pool.query<{ project_id: string }>(
    'select project_id from jobs where id = $1',
    [jobId],
  );
  if (!rows[0]) throw new NotFoundError(`job ${jobId} does not exist`);
  return rows[0].project_id;
}

/**
 * The projects a person signed in with a forge may read, each asked of the
 * forge (the answers are kept five minutes), all at once under one deadline
 * for the page: the sign-in timeout. `unanswered` when the forge did not
 * answer about some of them in time (they are left out).
 */
async function readableProjects(
  ctx: AppContext,
  people: PeopleGate,
  person: Person & { kind: 'forge' },
): Promise<{ ids: string[]; unanswered: boolean }> {
  const { rows } = await ctx.pool.query<{ id: string }>(
    'select id from projects where forge = $1 order by id',
    [person.forge],
  );
  const answers: (boolean | null)[] = rows.map(() => null);
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, ctx.config.CONDUCTOR_SIGNIN_TIMEOUT_MS + 50);
  });
  // At most 16 questions in flight (most are answered from the cache), all
  // under the one deadline: those not answered by then are left out.
  let next = 0;
  let late = false;
  const asked = Promise.all(
    Array.from({ length: Math.min(16, rows.length) }, async () => {
      while (!late && next < rows.length) {
        const i = next++;
        try {
          const decision = await people.may(ctx, person, rows[i]!.id, 'view');
          answers[i] = decision.allowed ? true : decision.status === 503 ? null : false;
        } catch {
          // Left out, as unanswered: the page says some projects may be missing.
        }
      }
    }),
  );
  await Promise.race([asked, deadline]);
  late = true;
  clearTimeout(timer);
  return {
    ids: rows.filter((_, i) => answers[i] === true).map((p) => p.id),
    unanswered: answers.some((a) => a === null),
  };
}

/** Errors of a page as a page: the status and message a person can read. */
function asPage(route: PageRoute): PageRoute {
  return async (event, ctx, act, people) => {
    try {
      return await route(event, ctx, act, people);
    } catch (err) {
      if (!(err instanceof AppError) || !err.expose) throw err;
      const viewer = viewerOf(ctx, sessionOf(event, ctx));
      return htmlReply(err.status, renderError(err.status, err.message, viewer));
    }
  };
}

const JobPageQuery = z.object({
  task: z.optional(z.string().check(z.regex(UUID, 'must be a task id'))),
  attempt: z.optional(z.coerce.number().check(z.int(), z.gte(1), z.lte(2_147_483_647))),
  sig: z.optional(z.string()),
});
const LiveQuery = z.object({
  task: z.optional(z.string().check(z.regex(UUID, 'must be a task id'))),
  // 0: the task had not started when the page was drawn.
  attempt: z.pipe(
    z.optional(z.coerce.number().check(z.int(), z.gte(0), z.lte(2_147_483_647))),
    z.transform((a: number | undefined) => (a ? a : undefined)),
  ),
  from: z.optional(z.coerce.number().check(z.int(), z.gte(0), z.lte(Number.MAX_SAFE_INTEGER))),
  line: z.optional(z.coerce.number().check(z.int(), z.gte(1), z.lte(Number.MAX_SAFE_INTEGER))),
  sig: z.optional(z.string()),
});
const LogQuery = z.object({
  task: z.string().check(z.regex(UUID, 'must be a task id')),
  attempt: z.coerce.number().check(z.int(), z.gte(1), z.lte(2_147_483_647)),
  before: z.coerce.number().check(z.int(), z.gte(0), z.lte(Number.MAX_SAFE_INTEGER)),
  sig: z.optional(z.string()),
});
const RawQuery = z.object({
  task: z.string().check(z.regex(UUID, 'must be a task id')),
  attempt: z.optional(z.coerce.number().check(z.int(), z.gte(1), z.lte(2_147_483_647))),
  offset: z._default(z.coerce.number().check(z.int(), z.gte(0), z.lte(Number.MAX_SAFE_INTEGER)), 0),
  /** `1`: each line starts with its time (lib/scheduler/log-times.ts). */
  timestamps: z.optional(z.enum(['0', '1'], { message: 'must be 0 or 1' })),
  sig: z.optional(z.string()),
});
const ProjectQuery = z.object({
  before: z.optional(z.coerce.number().check(z.int(), z.gte(1), z.lte(2_147_483_647))),
});

const adminTokenIs = (given: string, adminToken: string) =>
  timingSafeEqual(
    createHash('sha256').update(given).digest(),
    createHash('sha256').update(adminToken).digest(),
  );

/** A form whose CSRF token does not hold: stale, or not sent from this site. */
export function staleForm(viewer: Viewer): Reply {
  return htmlReply(
    403,
    renderError(
      403,
      'The form was stale or not sent from this site: reload the page and try again.',
      viewer,
    ),
  );
}

/** A job form: a session and its CSRF token, then the admin route's own code. */
function jobForm(action: 'cancel' | 'rerun' | 'approve'): PageRoute {
  return asPage(async (event, ctx, act, people) => {
    const who = await signedInAs(event, ctx);
    const jobId = pathParam(event, 'id');
    if (!who) return toLogin(event);
    const { session, person } = who;
    const fields = form(event);
    const viewer = viewerOf(ctx, session);
    if (!verifyCsrf(ctx.keyring, session, fields.get('csrf') ?? undefined)) {
      return staleForm(viewer);
    }
    if (!UUID.test(jobId)) throw new NotFoundError(`job ${jobId} does not exist`);
    const decision = await people.may(ctx, person, await projectOfJob(ctx, jobId), action);
    if (!decision.allowed) return refused(decision.status, decision.reason, viewer, jobId);
    const body = action === 'rerun' ? { failed_only: fields.get('failed_only') === 'true' } : {};
    const reply = await act(action, jobId.toLowerCase(), body, event, ctx, person);
    const created = (reply.body as { job_id?: string } | undefined)?.job_id;
    return redirect(`/jobs/${created ?? jobId.toLowerCase()}`);
  });
}

/**
 * The unblock form of a blocked task: a session and its CSRF token, then the
 * unblock with the form's `field.<name>` values. A refusal (a missing field,
 * a task no longer blocked) is shown on a page of its own with the reason.
 */
const unblockForm: PageRoute = asPage(async (event, ctx, act, people) => {
  const who = await signedInAs(event, ctx);
  const jobId = pathParam(event, 'id');
  if (!who) return toLogin(event);
  const { session, person } = who;
  const fields = form(event);
  const viewer = viewerOf(ctx, session);
  if (!verifyCsrf(ctx.keyring, session, fields.get('csrf') ?? undefined)) {
    return staleForm(viewer);
  }
  if (!UUID.test(jobId)) throw new NotFoundError(`job ${jobId} does not exist`);
  const decision = await people.may(ctx, person, await projectOfJob(ctx, jobId), 'unblock');
  if (!decision.allowed) return refused(decision.status, decision.reason, viewer, jobId);
  const values: Record<string, string> = {};
  for (const [key, value] of fields) {
    if (key.startsWith('field.')) values[key.slice('field.'.length)] = value;
  }
  const task = pathParam(event, 'name');
  await act('unblock', jobId.toLowerCase(), { task, fields: values }, event, ctx, person);
  return redirect(`/jobs/${jobId.toLowerCase()}`);
});

const BadgeQuery = z.object({
  ref: z.optional(z.string().check(z.maxLength(1024))),
  sig: z.optional(z.string().check(z.maxLength(100))),
});

/**
 * Whether the signed-in person may start runs of the project (the Run form):
 * the one check the form and its page ask, as lib/app/people.ts decides
 * `run` (the admin token: yes; a forge person: write access).
 */
async function mayRun(
  ctx: AppContext,
  people: PeopleGate,
  person: Person,
  projectId: string,
): Promise<{ allowed: true } | { allowed: false; status: 403 | 404 | 503; reason: string }> {
  return people.may(ctx, person, projectId, 'run');
}

/** The Run form (for those who may run), the schedules and the badge, under the project's jobs. */
async function projectExtras(
  event: HttpEvent,
  ctx: AppContext,
  people: PeopleGate,
  id: string,
  who: { session: Session; person: Person } | null,
  visibility: string,
): Promise<Html | string> {
  const parts: Array<Html | string> = [];
  if (who && (await mayRun(ctx, people, who.person, id)).allowed) {
    parts.push(
      html`<p><a href="/projects/${encodeURIComponent(id)}/settings" data-settings-link>Settings</a></p>`,
    );
    parts.push(await renderRunForm(ctx.pool, id, csrfToken(ctx.keyring, who.session)));
  }
  parts.push(await renderSchedules(ctx.pool, id));
  // A private project's signed badge URL only for those signed in.
  if (visibility === 'public' || who) {
    parts.push(
      await renderBadgeSection(
        ctx.pool,
        ctx.keyring,
        id,
        origin(event, ctx),
        visibility === 'public',
      ),
    );
  }
  return html`${parts}`;
}

/**
 * The Run form's post: a session, its CSRF token and the right to run, then
 * the manual trigger with the form's ref and `input.<name>` values; answers
 * the new job's page. A bad ref, an input the pipeline at the ref's head
 * does not take, or a value it refuses is a 400 page naming it, and no job is
 * made (when that file could not be read, the job's compile says why).
 */
const runForm: PageRoute = asPage(async (event, ctx, act, people) => {
  const who = await signedInAs(event, ctx);
  if (!who) return toLogin(event);
  const projectId = pathParam(event, 'id');
  const fields = form(event);
  const viewer = viewerOf(ctx, who.session);
  if (!verifyCsrf(ctx.keyring, who.session, fields.get('csrf') ?? undefined)) {
    return staleForm(viewer);
  }
  const decision = await mayRun(ctx, people, who.person, projectId);
  if (!decision.allowed) return refused(decision.status, decision.reason, viewer);
  const inputs: Record<string, string> = {};
  for (const [key, value] of fields) {
    // An optional choice left blank is not given.
    if (key.startsWith('input.') && value !== '') inputs[key.slice('input.'.length)] = value;
  }
  const reply = await act(
    'run',
    projectId,
    { ref: fields.get('ref') ?? '', inputs },
    event,
    ctx,
    who.person,
  );
  const created = (reply.body as { job_id?: string } | undefined)?.job_id;
  return redirect(created ? `/jobs/${created}` : `/projects/${encodeURIComponent(projectId)}`);
});

/** Every page route by its route key (lib/http/routes.ts). */
export const PAGE_ROUTES: Record<string, PageRoute> = {
  'GET /': asPage(async (event, ctx, _act, people) => {
    const who = await signedInAs(event, ctx);
    const viewer = viewerOf(ctx, who?.session ?? null);
    // A person signed in with a forge sees the projects that forge lets them read.
    const readable =
      who?.person.kind === 'forge' ? await readableProjects(ctx, people, who.person) : undefined;
    let home = await renderHome(ctx.pool, { ...viewer, only: readable?.ids });
    // Signed in: the way to add a repository (lib/pages/onboard.ts).
    if (who)
      home = home.replace(
        '<h1>Projects</h1>',
        '<h1>Projects</h1><p><a class="button" href="/repositories" data-add-project>Add a project</a></p>',
      );
    if (!readable?.unanswered || who?.person.kind !== 'forge') return htmlReply(200, home);
    const notice = html`<p class="notice">${forgeName(who.person.forge)} did not answer; some projects may be missing. Reload in a moment.</p>`;
    return htmlReply(200, home.replace('<h1>Projects</h1>', `<h1>Projects</h1>${notice}`));
  }),
  'GET /projects/{id}': asPage(async (event, ctx, _act, people) => {
    const id = pathParam(event, 'id');
    const who = await signedInAs(event, ctx);
    const viewer = viewerOf(ctx, who?.session ?? null);
    const visibility = await projectVisibility(ctx.pool, id);
    if (!who && visibility !== 'public') return toLogin(event);
    if (who?.person.kind === 'forge' && visibility !== null) {
      const decision = await people.may(ctx, who.person, id, 'view');
      if (!decision.allowed) return refused(decision.status, decision.reason, viewer);
    }
    const { before } = queryParams(event, ProjectQuery);
    const extras =
      visibility === null ? '' : await projectExtras(event, ctx, people, id, who, visibility);
    // The build hosts (names, pools, labels, scope) only to the admin and to
    // people who may write (issue #46: any signed-in account saw them).
    const workers =
      who !== null && visibility !== null && (await mayRun(ctx, people, who.person, id)).allowed;
    return htmlReply(
      200,
      await renderProject(ctx.pool, id, { ...viewer, workers }, before, Date.now(), extras),
    );
  }),
  'POST /projects/{id}/run': runForm,
  'GET /projects/{id}/badge.svg': async (event, ctx) => {
    const { ref, sig } = queryParams(event, BadgeQuery);
    return badgeReply(ctx.pool, ctx.keyring, pathParam(event, 'id'), { ref, sig });
  },
  'GET /jobs/{id}': asPage(async (event, ctx, _act, people) => {
    const access = await jobAccess(event, ctx, people);
    if (!('jobId' in access)) return access;
    const query = queryParams(event, JobPageQuery);
    return htmlReply(200, await renderJobPage(ctx.pool, access.jobId, access.viewer, query));
  }),
  'GET /jobs/{id}/live': async (event, ctx, _act, people) => {
    const access = await jobAccess(event, ctx, people);
    if (!('jobId' in access)) return access;
    const query = queryParams(event, LiveQuery);
    return {
      status: 200,
      body: await liveJob(ctx.pool, access.jobId, access.viewer, query),
      headers: { 'cache-control': 'no-store' },
    };
  },
  // A download link of the job page's artifacts list: whoever may read the
  // job is sent to a short-lived signed URL of the file itself.
  'GET /jobs/{id}/artifacts/{artifact}': async (event, ctx, _act, people) => {
    const access = await jobAccess(event, ctx, people);
    if (!('jobId' in access)) return access;
    const wanted = pathParam(event, 'artifact');
    const artifact = (await jobArtifacts(ctx.pool, access.jobId)).find((a) => a.id === wanted);
    if (!artifact) throw new NotFoundError(`job ${access.jobId} has no artifact ${wanted}`);
    const store = storeFor(ctx.storage, ctx.config, ctx.keyring);
    const location = await store.downloadUrl(
      artifact.storage_key,
      artifact.path,
      DOWNLOAD_URL_TTL_S,
    );
    return { status: 302, headers: { location, 'cache-control': 'no-store' } };
  },
  'GET /jobs/{id}/log': async (event, ctx, _act, people) => {
    const access = await jobAccess(event, ctx, people);
    if (!('jobId' in access)) return access;
    const q = queryParams(event, LogQuery);
    return {
      status: 200,
      body: await earlierLog(ctx.pool, access.jobId, q.task, q.attempt, q.before),
      headers: { 'cache-control': 'no-store' },
    };
  },
  'GET /jobs/{id}/raw': async (event, ctx, _act, people) => {
    const access = await jobAccess(event, ctx, people);
    if (!('jobId' in access)) return access;
    const q = queryParams(event, RawQuery);
    const source = await logSource(ctx.pool, access.jobId, q.task);
    const log = await readLog(ctx.pool, source, q.attempt, q.offset);
    return {
      status: 200,
      text: q.timestamps === '1' ? await stampPage(ctx.pool, source, log, q.offset) : log.text,
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
  'POST /jobs/{id}/tasks/{name}/unblock': unblockForm,
  'GET /login': asPage(async (event, ctx, _act, people) => {
    const next = safeNext(event.queryStringParameters?.next);
    // Without a signed cookie the database is not asked (the idle gate's sign-in page).
    if (sessionOf(event, ctx) && (await signedInAs(event, ctx))) return redirect(next);
    return htmlReply(
      200,
      renderLogin({ next, signedIn: false, forges: await people.signInForges(ctx) }),
    );
  }),
  'GET /login/{forge}': asPage(async (event, ctx, _act, people) => {
    const name = pathParam(event, 'forge');
    const forge = await people.oauthForge(ctx, name);
    if (!forge) throw new NotFoundError(`there is no sign-in with ${name} here`);
    const next = safeNext(event.queryStringParameters?.next);
    const callback = callbackUrl(event, ctx, forge.forge);
    // Nothing is written: the sign-in's state travels in the browser's sealed cookie.
    const { url, state, verifier, startedMs } = await startSignIn(forge, callback);
    const sealed = sealSignIn(ctx.keyring, {
      forge: forge.forge,
      state,
      verifier,
      next,
      startedMs,
    });
    return {
      status: 302,
      headers: { location: url, 'cache-control': 'no-store' },
      cookies: [signInCookie(sealed, forge.forge, secure(event, ctx))],
    };
  }),
  'GET /login/{forge}/callback': asPage(async (event, ctx, _act, people) => {
    const name = pathParam(event, 'forge');
    const forge = await people.oauthForge(ctx, name);
    if (!forge) throw new NotFoundError(`there is no sign-in with ${name} here`);
    const callback = callbackUrl(event, ctx, forge.forge);
    // The state is good once: the browser's copy goes whatever happens.
    const forget = signInCookie(null, forge.forge, secure(event, ctx));
    try {
      const { login, next } = await finishSignIn(
        ctx.pool,
        forge,
        callback,
        new URL(`${callback}?${event.rawQueryString ?? ''}`),
        // The cookie verifies before the database is asked anything.
        openSignIn(ctx.keyring, cookie(event, STATE_COOKIE)),
      );
      const cookieSession = newSession(ctx.keyring, ctx.adminToken);
      await createSession(ctx.pool, cookieSession.id, cookieSession.expiresS, {
        kind: 'forge',
        forge: forge.forge,
        login,
      });
      await purgeEndedSessions(ctx.pool);
      return htmlReply(200, renderSignedIn(forge.forge, login, next), {
        cookies: [sessionCookie(cookieSession.value, secure(event, ctx)), forget],
      });
    } catch (err) {
      if (!(err instanceof SignInError)) throw err;
      return htmlReply(err.status, renderError(err.status, err.message, { signedIn: false }), {
        cookies: [forget],
        ...(err.status === 503 ? { headers: { 'retry-after': '5' } } : {}),
      });
    }
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
    await createSession(ctx.pool, session.id, session.expiresS, { kind: 'admin' });
    await purgeEndedSessions(ctx.pool);
    return redirect(next, [sessionCookie(session.value, secure(event, ctx))]);
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
    // The row goes: the cookie, wherever a copy of it is, opens nothing from now on.
    if (session) await endSession(ctx.pool, session.id);
    return redirect('/', [sessionCookie(null, secure(event, ctx))]);
  }),
};

/**
 * What a closed idle gate answers an anonymous visitor's page without the
 * database (no job can proceed, and the database may be paused: a stranger
 * must not wake it): a page saying Conductor is idle, with the way to sign
 * in. Undefined for anything else: a signed-in viewer, a valid signed job
 * link, the sign-in page, a form, an open gate.
 */
export async function idlePage(event: HttpEvent, ctx: AppContext): Promise<Reply | undefined> {
  if (!ctx.gate || (event.requestContext?.http?.method ?? 'GET') !== 'GET') return undefined;
  // Signing in goes on while idle, with a forge too (/login/{forge} and its callback).
  if (/^\/login(\/|$)/.test(event.rawPath) || sessionOf(event, ctx)) return undefined;
  const sig = event.queryStringParameters?.sig;
  const jobId = /^\/jobs\/([^/]+)/.exec(event.rawPath)?.[1];
  if (sig !== undefined && jobId && UUID.test(jobId) && verifyJobLink(ctx.keyring, jobId, sig)) {
    return undefined;
  }
  if (await ctx.gate.mayHaveWork()) return undefined;
  return htmlReply(
    200,
    page({
      title: 'Idle',
      body: html`<h1>Conductor is idle</h1><p>Nothing is running, and its database is paused until work comes. Signed-in people see every page as usual.</p><p><a href="/login?next=${encodeURIComponent(event.rawPath)}">Sign in</a></p>`,
      signedIn: false,
    }),
  );
}
