import {
  ArtifactBeginSchema,
  artifactDownloadUrl,
  beginArtifact,
  CommitSchema,
  commitArtifact,
  LeaseSchema,
  listJobArtifacts,
  neededArtifactsFor,
} from '../lib/app/artifacts.ts';
import { auditJob, listInstallationAudit, listProjectAudit } from '../lib/app/audit.ts';
import {
  CacheRestoreSchema,
  CacheSaveSchema,
  commitCache,
  deleteProjectCache,
  listProjectCaches,
  restoreCache,
  saveCache,
} from '../lib/app/caches.ts';
import { refreshDirectoryEntry } from '../lib/app/directory.ts';
import { withEcsProvider } from '../lib/app/fleet-aws.ts';
import { checkHealth, checkReady } from '../lib/app/health.ts';
import {
  approveBlockedJob,
  cancelJobNow,
  RerunSchema,
  rerunFinishedJob,
  startManualJob,
  TriggerSchema,
} from '../lib/app/jobs.ts';
import {
  createNotification,
  deleteNotification,
  listNotifications,
  NotificationCreateSchema,
} from '../lib/app/notifications.ts';
import { removeProject } from '../lib/app/onboarding.ts';
import {
  ADMIN_BEARER,
  openSessions,
  type Person,
  peopleGate,
  revokeSession,
} from '../lib/app/people.ts';
import {
  createPool,
  deletePool,
  listPools,
  PoolCreateSchema,
  PoolUpdateSchema,
  updatePool,
} from '../lib/app/pools.ts';
import {
  createProject,
  deleteSecret,
  getProject,
  listProjects,
  listSecrets,
  ProjectCreateSchema,
  ProjectUpdateSchema,
  putSecret,
  rotateWebhookSecret,
  SecretPutSchema,
  updateProject,
} from '../lib/app/projects.ts';
import {
  beginReport,
  commitReport,
  listJobTests,
  ReportBeginSchema,
  ReportCommitSchema,
} from '../lib/app/reports.ts';
import {
  changeSchedule,
  createSchedule,
  projectSchedules,
  removeSchedule,
  ScheduleCreateSchema,
  ScheduleUpdateSchema,
} from '../lib/app/schedules.ts';
import { projectAdmin } from '../lib/app/settings.ts';
import { UnblockSchema, unblockJobTask } from '../lib/app/unblock.ts';
import {
  getJobWithPage,
  listProjectJobs,
  MAX_LOG_PAGE_BYTES,
  readTaskLog,
  stampedLog,
} from '../lib/app/views.ts';
import {
  createWorker,
  listWorkers,
  requireWorker,
  revokeWorker,
  WorkerCreateSchema,
} from '../lib/app/workers.ts';
import { type AppContext, getContext } from '../lib/context.ts';
import { NotFoundError } from '../lib/errors.ts';
import { requireAdmin } from '../lib/http/auth.ts';
import {
  type HttpEvent,
  header,
  httpFunction,
  idParam,
  jsonBody,
  pathParam,
  queryParams,
  type Reply,
} from '../lib/http/index.ts';
import { matchRoute } from '../lib/http/routes.ts';
import { siteOrigin } from '../lib/pages/access.ts';
import type { JobAction } from '../lib/pages/index.ts';
import * as z from '../lib/zod.ts';

// The web pages (lib/pages: the HTML, the graph's layout, the log's colours)
// are an `import()` at the first page request: an API call's cold start does
// not load them (docs/architecture.md, "Bundles"). Every page is off /v1/.
const pages = () => import('../lib/pages/index.ts');

const JobListQuery = z.object({
  limit: z._default(z.coerce.number().check(z.int(), z.gte(1), z.lte(100)), 20),
  before: z.optional(z.coerce.number().check(z.int(), z.gte(1), z.lte(2_147_483_647))),
});
const LogQuery = z.object({
  attempt: z.optional(z.coerce.number().check(z.int(), z.gte(1), z.lte(2_147_483_647))),
  offset: z._default(z.coerce.number().check(z.int(), z.gte(0), z.lte(Number.MAX_SAFE_INTEGER)), 0),
  limit: z._default(
    z.coerce.number().check(z.int(), z.gte(1), z.lte(MAX_LOG_PAGE_BYTES)),
    MAX_LOG_PAGE_BYTES,
  ),
  timestamps: z.optional(z.enum(['0', '1'], { message: 'must be 0 or 1' })),
});

const AuditQuery = z.object({
  limit: z._default(z.coerce.number().check(z.int(), z.gte(1), z.lte(100)), 20),
  before: z.optional(z.coerce.number().check(z.int(), z.gte(1), z.lte(Number.MAX_SAFE_INTEGER))),
});

/** An admin route; `by` is who acts (the admin token, or a page's signed-in person), for the audit. */
type Route = (event: HttpEvent, ctx: AppContext, by?: Person) => Promise<Reply>;

/** Where this API's pages are (lib/pages/access.ts, siteOrigin). */
function pagesOrigin(event: HttpEvent, ctx: AppContext): string {
  return siteOrigin(
    ctx.config.CONDUCTOR_PUBLIC_URL,
    header(event, 'host') ?? event.requestContext?.domainName,
    header(event, 'x-forwarded-proto'),
  );
}

const routes: Record<string, Route> = {
  'POST /v1/projects': async (event, ctx, by) => ({
    status: 201,
    body: await createProject(ctx.pool, ctx.keyring, jsonBody(event, ProjectCreateSchema), by),
  }),
  'GET /v1/projects': async (_event, ctx) => ({
    status: 200,
    body: { projects: await listProjects(ctx.pool) },
  }),
  'GET /v1/projects/{id}': async (event, ctx) => ({
    status: 200,
    body: { project: await getProject(ctx.pool, pathParam(event, 'id')) },
  }),
  'PATCH /v1/projects/{id}': async (event, ctx, by) => ({
    status: 200,
    body: {
      project: await updateProject(
        ctx.pool,
        ctx.keyring,
        pathParam(event, 'id'),
        jsonBody(event, ProjectUpdateSchema),
        by,
        ctx.gate,
      ),
    },
  }),
  'DELETE /v1/projects/{id}': async (event, ctx, by = ADMIN_BEARER) => {
    // The webhook Conductor made for it goes too (a project added from the page).
    const { hook } = await removeProject(ctx, pathParam(event, 'id'), by);
    return {
      status: 204,
      ...(typeof hook === 'object' ? { headers: { 'x-conductor-warning': hook.left } } : {}),
    };
  },
  'POST /v1/projects/{id}/webhook-secret': async (event, ctx, by) => {
    const id = pathParam(event, 'id');
    const secret = await rotateWebhookSecret(ctx.pool, ctx.keyring, id, by);
    // A closed gate checks signatures against the directory: tell it first.
    await refreshDirectoryEntry(ctx, id);
    return { status: 200, body: { webhook_secret: secret } };
  },
  'GET /v1/projects/{id}/audit': async (event, ctx) => {
    const { limit, before } = queryParams(event, AuditQuery);
    return {
      status: 200,
      body: { events: await listProjectAudit(ctx.pool, pathParam(event, 'id'), limit, before) },
    };
  },
  'GET /v1/projects/{id}/secrets': async (event, ctx) => ({
    status: 200,
    body: { secrets: await listSecrets(ctx.pool, pathParam(event, 'id')) },
  }),
  'PUT /v1/projects/{id}/secrets/{name}': async (event, ctx, by) => {
    const { value } = jsonBody(event, SecretPutSchema);
    const { warning } = await putSecret(
      ctx.pool,
      ctx.keyring,
      pathParam(event, 'id'),
      pathParam(event, 'name'),
      value,
      by,
    );
    return { status: 204, ...(warning ? { headers: { 'x-conductor-warning': warning } } : {}) };
  },
  'DELETE /v1/projects/{id}/secrets/{name}': async (event, ctx, by) => {
    await deleteSecret(ctx.pool, pathParam(event, 'id'), pathParam(event, 'name'), by);
    return { status: 204 };
  },
  'POST /v1/projects/{id}/notifications': async (event, ctx, by) => ({
    status: 201,
    body: await createNotification(
      ctx.pool,
      ctx.keyring,
      pathParam(event, 'id'),
      jsonBody(event, NotificationCreateSchema),
      by,
    ),
  }),
  'GET /v1/projects/{id}/notifications': async (event, ctx) => ({
    status: 200,
    body: { notifications: await listNotifications(ctx.pool, pathParam(event, 'id')) },
  }),
  'DELETE /v1/projects/{id}/notifications/{nid}': async (event, ctx, by) => {
    await deleteNotification(ctx.pool, pathParam(event, 'id'), pathParam(event, 'nid'), by);
    return { status: 204 };
  },
  'GET /v1/projects/{id}/jobs': async (event, ctx) => {
    const projectId = pathParam(event, 'id');
    const { limit, before } = queryParams(event, JobListQuery);
    return {
      status: 200,
      body: { jobs: await listProjectJobs(ctx.pool, projectId, limit, before) },
    };
  },
  'POST /v1/projects/{id}/jobs': async (event, ctx, by) => {
    const trigger = jsonBody(event, TriggerSchema);
    const job = await startManualJob(ctx, pathParam(event, 'id'), trigger, by);
    return { status: 202, body: { job_id: job.id, number: job.number } };
  },
  'GET /v1/jobs/{id}': async (event, ctx) => ({
    status: 200,
    body: await getJobWithPage(
      ctx.pool,
      ctx.keyring,
      idParam(event, 'id', 'job'),
      pagesOrigin(event, ctx),
    ),
  }),
  'POST /v1/jobs/{id}/cancel': async (event, ctx, by) => ({
    status: 200,
    body: { job: await cancelJobNow(ctx, idParam(event, 'id', 'job'), by) },
  }),
  'POST /v1/jobs/{id}/approve': async (event, ctx, by) => ({
    status: 200,
    body: { job: await approveBlockedJob(ctx, idParam(event, 'id', 'job'), by) },
  }),
  'POST /v1/jobs/{id}/tasks/{name}/unblock': async (event, ctx, by = ADMIN_BEARER) => {
    const jobId = idParam(event, 'id', 'job');
    const task = await unblockJobTask(
      ctx,
      jobId,
      pathParam(event, 'name'),
      jsonBody(event, UnblockSchema),
      by,
    );
    await auditJob(ctx.pool, by, jobId, 'unblock', task.name);
    return { status: 200, body: { task } };
  },
  'POST /v1/jobs/{id}/rerun': async (event, ctx, by) => {
    const { failed_only } = jsonBody(event, RerunSchema);
    const job = await rerunFinishedJob(ctx, idParam(event, 'id', 'job'), failed_only, by);
    return { status: 202, body: { job_id: job.id, number: job.number } };
  },
  'GET /v1/tasks/{id}/log': async (event, ctx) => {
    const { attempt, offset, limit, timestamps } = queryParams(event, LogQuery);
    const taskId = idParam(event, 'id', 'task');
    const log = await readTaskLog(ctx.pool, taskId, attempt, offset, limit);
    return {
      status: 200,
      text:
        timestamps === '1'
          ? await stampedLog(ctx.pool, log.copiedFrom ?? taskId, log, offset)
          : log.text,
      headers: {
        'x-log-attempt': String(log.attempt),
        'x-log-size': String(log.size),
        'x-log-end': String(log.end),
        ...(log.copiedFrom ? { 'x-log-copied-from': log.copiedFrom } : {}),
      },
    };
  },
  'POST /v1/workers': async (event, ctx, by) => ({
    status: 201,
    body: await createWorker(ctx.pool, jsonBody(event, WorkerCreateSchema), ctx.gate, by),
  }),
  'GET /v1/workers': async (_event, ctx) => ({
    status: 200,
    body: { workers: await listWorkers(ctx.pool) },
  }),
  'DELETE /v1/workers/{id}': async (event, ctx, by) => {
    await revokeWorker(ctx.pool, idParam(event, 'id', 'worker'), ctx.gate, by);
    return { status: 204 };
  },
  'GET /v1/sessions': async (_event, ctx) => ({
    status: 200,
    body: { sessions: await openSessions(ctx) },
  }),
  'DELETE /v1/sessions/{id}': async (event, ctx, by) => {
    await revokeSession(ctx, idParam(event, 'id', 'session'), by);
    return { status: 204 };
  },
  'GET /v1/audit': async (event, ctx) => {
    const { limit, before } = queryParams(event, AuditQuery);
    return { status: 200, body: { events: await listInstallationAudit(ctx.pool, limit, before) } };
  },
};

// Artifacts and caches (docs/artifacts.md): the admin routes.
const CacheDeleteQuery = z.object({
  scope: z.optional(z.string().check(z.minLength(1), z.maxLength(1100))),
});
Object.assign(routes, {
  'GET /v1/jobs/{id}/artifacts': async (event, ctx) => ({
    status: 200,
    body: await listJobArtifacts(ctx, idParam(event, 'id', 'job')),
  }),
  'GET /v1/jobs/{id}/tests': async (event, ctx) => ({
    status: 200,
    body: await listJobTests(ctx, idParam(event, 'id', 'job')),
  }),
  'GET /v1/artifacts/{id}': async (event, ctx) => ({
    status: 302,
    headers: {
      location: await artifactDownloadUrl(ctx, idParam(event, 'id', 'artifact')),
      'cache-control': 'no-store',
    },
  }),
  'GET /v1/projects/{id}/caches': async (event, ctx) => ({
    status: 200,
    body: await listProjectCaches(ctx, pathParam(event, 'id')),
  }),
  'DELETE /v1/projects/{id}/caches/{key}': async (event, ctx, by) => {
    const { scope } = queryParams(event, CacheDeleteQuery);
    const [id, key] = [pathParam(event, 'id'), pathParam(event, 'key')];
    await deleteProjectCache(ctx, id, key, scope ?? null, by);
    return { status: 204 };
  },
} satisfies Record<string, Route>);

// Runner pools (docs/runner.md, "Runner pools"): the admin's, by name.
Object.assign(routes, {
  'POST /v1/pools': async (event, ctx, by) => ({
    status: 201,
    body: { pool: await createPool(ctx, jsonBody(event, PoolCreateSchema), by) },
  }),
  'GET /v1/pools': async (_event, ctx) => ({
    status: 200,
    body: { pools: await listPools(ctx) },
  }),
  'PATCH /v1/pools/{name}': async (event, ctx, by) => ({
    status: 200,
    body: {
      pool: await updatePool(ctx, pathParam(event, 'name'), jsonBody(event, PoolUpdateSchema), by),
    },
  }),
  'DELETE /v1/pools/{name}': async (event, ctx, by) => {
    await deletePool(ctx, pathParam(event, 'name'), by);
    return { status: 204 };
  },
} satisfies Record<string, Route>);

// Schedules (docs/schedules.md): the project's, by name.
Object.assign(routes, {
  'POST /v1/projects/{id}/schedules': async (event, ctx, by) => ({
    status: 201,
    body: {
      schedule: await createSchedule(
        ctx,
        pathParam(event, 'id'),
        jsonBody(event, ScheduleCreateSchema),
        new Date(),
        by,
      ),
    },
  }),
  'GET /v1/projects/{id}/schedules': async (event, ctx) => ({
    status: 200,
    body: { schedules: await projectSchedules(ctx, pathParam(event, 'id')) },
  }),
  'PATCH /v1/projects/{id}/schedules/{name}': async (event, ctx, by) => ({
    status: 200,
    body: {
      schedule: await changeSchedule(
        ctx,
        pathParam(event, 'id'),
        pathParam(event, 'name'),
        jsonBody(event, ScheduleUpdateSchema),
        new Date(),
        by,
      ),
    },
  }),
  'DELETE /v1/projects/{id}/schedules/{name}': async (event, ctx, by) => {
    await removeSchedule(ctx, pathParam(event, 'id'), pathParam(event, 'name'), by);
    return { status: 204 };
  },
} satisfies Record<string, Route>);

// The runner's artifact and cache routes: a worker token, and the lease the
// body names (a 409 when it is not the current one), as heartbeat and complete.
const runnerRoutes: Record<string, Route> = {
  'POST /v1/runner/tasks/{id}/artifacts': async (event, ctx) => {
    const worker = await requireWorker(ctx.pool, event);
    const body = jsonBody(event, ArtifactBeginSchema);
    const taskId = idParam(event, 'id', 'task');
    return { status: 200, body: await beginArtifact(ctx, worker.id, taskId, body) };
  },
  'POST /v1/runner/tasks/{id}/artifacts/{artifact}/commit': async (event, ctx) => {
    const worker = await requireWorker(ctx.pool, event);
    const body = jsonBody(event, CommitSchema);
    const id = idParam(event, 'id', 'task');
    return {
      status: 200,
      body: await commitArtifact(ctx, worker.id, id, idParam(event, 'artifact', 'artifact'), body),
    };
  },
  'POST /v1/runner/tasks/{id}/reports': async (event, ctx) => {
    const worker = await requireWorker(ctx.pool, event);
    const body = jsonBody(event, ReportBeginSchema);
    const taskId = idParam(event, 'id', 'task');
    return { status: 200, body: await beginReport(ctx, worker.id, taskId, body) };
  },
  'POST /v1/runner/tasks/{id}/reports/{report}/commit': async (event, ctx) => {
    const worker = await requireWorker(ctx.pool, event);
    const body = jsonBody(event, ReportCommitSchema);
    const id = idParam(event, 'id', 'task');
    return {
      status: 200,
      body: await commitReport(ctx, worker.id, id, idParam(event, 'report', 'report'), body),
    };
  },
  'POST /v1/runner/tasks/{id}/needs-artifacts': async (event, ctx) => {
    const worker = await requireWorker(ctx.pool, event);
    const { lease_id } = jsonBody(event, LeaseSchema);
    return {
      status: 200,
      body: await neededArtifactsFor(ctx, worker.id, idParam(event, 'id', 'task'), lease_id),
    };
  },
  'POST /v1/runner/tasks/{id}/caches/restore': async (event, ctx) => {
    const worker = await requireWorker(ctx.pool, event);
    const body = jsonBody(event, CacheRestoreSchema);
    const taskId = idParam(event, 'id', 'task');
    return { status: 200, body: await restoreCache(ctx, worker.id, taskId, body) };
  },
  'POST /v1/runner/tasks/{id}/caches/save': async (event, ctx) => {
    const worker = await requireWorker(ctx.pool, event);
    const body = jsonBody(event, CacheSaveSchema);
    const taskId = idParam(event, 'id', 'task');
    return { status: 200, body: await saveCache(ctx, worker.id, taskId, body) };
  },
  'POST /v1/runner/tasks/{id}/caches/{cache}/commit': async (event, ctx) => {
    const worker = await requireWorker(ctx.pool, event);
    const body = jsonBody(event, CommitSchema);
    const id = idParam(event, 'id', 'task');
    return {
      status: 200,
      body: await commitCache(ctx, worker.id, id, idParam(event, 'cache', 'cache entry'), body),
    };
  },
};

/** A page's form on a job goes through the admin route of the same name. */
const jobAction: JobAction = async (action, jobId, body, event, ctx, by = ADMIN_BEARER) => {
  if (action === 'unblock') {
    // The page's person: the use case checks they may (mayUnblock) and records who.
    const task = await unblockJobTask(
      ctx,
      jobId,
      String(body.task ?? ''),
      UnblockSchema.parse({ fields: body.fields }),
      by,
    );
    await auditJob(ctx.pool, by, jobId, 'unblock', task.name);
    return { status: 200, body: { task } };
  }
  if (action === 'run') {
    // The Run form: `jobId` is the project's id; the manual trigger's own route.
    const run = routes['POST /v1/projects/{id}/jobs']!;
    const json = { pathParameters: { id: jobId }, body: JSON.stringify(body) };
    return run({ ...event, ...json, isBase64Encoded: false }, ctx, by);
  }
  const route = routes[`POST /v1/jobs/{id}/${action}`];
  if (!route) throw new NotFoundError(`no ${action} for jobs`);
  const json = {
    pathParameters: { id: jobId },
    body: JSON.stringify(body),
    isBase64Encoded: false,
  };
  return route({ ...event, ...json }, ctx, by);
};

/** Every admin route, the pages, the health check, and the JSON 404 for anything else (`$default`). */
async function main(event: HttpEvent): Promise<Reply> {
  const method = event.requestContext?.http?.method ?? 'GET';
  const match = matchRoute(method, event.rawPath);
  if (!match || match.route.fn !== 'api') {
    throw new NotFoundError(`no route ${method} ${event.rawPath}`);
  }
  // API Gateway fills these for a route of its own; `$default` leaves them out.
  event.pathParameters = { ...match.params, ...event.pathParameters };
  const key = `${match.route.method} ${match.route.path}`;
  const ctx = withEcsProvider(await getContext());
  if (key === 'GET /v1/health') return { status: 200, body: await checkHealth(ctx) };
  if (key === 'GET /v1/ready') {
    const ready = await checkReady(ctx);
    return {
      status: ready.ready ? 200 : 503,
      body: ready,
      headers: { 'cache-control': 'no-store' },
    };
  }
  if (!match.route.path.startsWith('/v1/')) {
    const { idlePage, PAGE_ROUTES } = await pages();
    const pageRoute = PAGE_ROUTES[key];
    if (pageRoute) {
      return (await idlePage(event, ctx)) ?? pageRoute(event, ctx, jobAction, peopleGate);
    }
    const [{ ONBOARD_ROUTES }, { SETTINGS_ROUTES }] = await Promise.all([
      import('../lib/pages/onboard.ts'),
      import('../lib/pages/settings.ts'),
    ]);
    const adminPage = SETTINGS_ROUTES[key] ?? ONBOARD_ROUTES[key];
    if (adminPage) {
      return (await idlePage(event, ctx)) ?? adminPage(event, ctx, projectAdmin, peopleGate);
    }
  }
  const runnerRoute = runnerRoutes[key];
  if (runnerRoute) return runnerRoute(event, ctx);
  requireAdmin(event, ctx.adminToken);
  const route = routes[key];
  if (!route) throw new NotFoundError(`no route ${method} ${event.rawPath}`);
  return route(event, ctx, ADMIN_BEARER);
}

export const handler = httpFunction(main);
