import { z } from 'zod';
import { checkHealth } from '../lib/app/health.ts';
import {
  approveBlockedJob,
  cancelJobNow,
  RerunSchema,
  rerunFinishedJob,
  startManualJob,
  TriggerSchema,
} from '../lib/app/jobs.ts';
import {
  createProject,
  deleteProject,
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
  getJobWithPage,
  listProjectJobs,
  MAX_LOG_PAGE_BYTES,
  readTaskLog,
} from '../lib/app/views.ts';
import { createWorker, listWorkers, revokeWorker, WorkerCreateSchema } from '../lib/app/workers.ts';
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
import { isLoopbackHost } from '../lib/pages/access.ts';
import { type JobAction, PAGE_ROUTES } from '../lib/pages/index.ts';

const JobListQuery = z.object({
  limit: z.coerce.number().int().min(1).max(100).default(20),
  before: z.coerce.number().int().min(1).max(2_147_483_647).optional(),
});
const LogQuery = z.object({
  attempt: z.coerce.number().int().min(1).max(2_147_483_647).optional(),
  offset: z.coerce.number().int().min(0).max(Number.MAX_SAFE_INTEGER).default(0),
  limit: z.coerce.number().int().min(1).max(MAX_LOG_PAGE_BYTES).default(MAX_LOG_PAGE_BYTES),
});

type Route = (event: HttpEvent, ctx: AppContext) => Promise<Reply>;

/**
 * Where this API's pages are: CONDUCTOR_PUBLIC_URL, else the host the
 * request came to (API Gateway says the scheme in x-forwarded-proto; the
 * local server, on loopback, serves plain http).
 */
function pagesOrigin(event: HttpEvent, ctx: AppContext): string {
  if (ctx.config.CONDUCTOR_PUBLIC_URL) return ctx.config.CONDUCTOR_PUBLIC_URL;
  const host = header(event, 'host') ?? event.requestContext?.domainName ?? 'localhost';
  const forwarded = header(event, 'x-forwarded-proto')?.split(',')[0]?.trim();
  const proto =
    forwarded === 'http' || forwarded === 'https'
      ? forwarded
      : isLoopbackHost(host)
        ? 'http'
        : 'https';
  return `${proto}://${host}`;
}

const routes: Record<string, Route> = {
  'POST /v1/projects': async (event, ctx) => ({
    status: 201,
    body: await createProject(ctx.pool, ctx.keyring, jsonBody(event, ProjectCreateSchema)),
  }),
  'GET /v1/projects': async (_event, ctx) => ({
    status: 200,
    body: { projects: await listProjects(ctx.pool) },
  }),
  'GET /v1/projects/{id}': async (event, ctx) => ({
    status: 200,
    body: { project: await getProject(ctx.pool, pathParam(event, 'id')) },
  }),
  'PATCH /v1/projects/{id}': async (event, ctx) => ({
    status: 200,
    body: {
      project: await updateProject(
        ctx.pool,
        ctx.keyring,
        pathParam(event, 'id'),
        jsonBody(event, ProjectUpdateSchema),
      ),
    },
  }),
  'DELETE /v1/projects/{id}': async (event, ctx) => {
    await deleteProject(ctx.pool, pathParam(event, 'id'));
    return { status: 204 };
  },
  'POST /v1/projects/{id}/webhook-secret': async (event, ctx) => ({
    status: 200,
    body: {
      webhook_secret: await rotateWebhookSecret(ctx.pool, ctx.keyring, pathParam(event, 'id')),
    },
  }),
  'GET /v1/projects/{id}/secrets': async (event, ctx) => ({
    status: 200,
    body: { secrets: await listSecrets(ctx.pool, pathParam(event, 'id')) },
  }),
  'PUT /v1/projects/{id}/secrets/{name}': async (event, ctx) => {
    const { value } = jsonBody(event, SecretPutSchema);
    const { warning } = await putSecret(
      ctx.pool,
      ctx.keyring,
      pathParam(event, 'id'),
      pathParam(event, 'name'),
      value,
    );
    return { status: 204, ...(warning ? { headers: { 'x-conductor-warning': warning } } : {}) };
  },
  'DELETE /v1/projects/{id}/secrets/{name}': async (event, ctx) => {
    await deleteSecret(ctx.pool, pathParam(event, 'id'), pathParam(event, 'name'));
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
  'POST /v1/projects/{id}/jobs': async (event, ctx) => {
    const trigger = jsonBody(event, TriggerSchema);
    const job = await startManualJob(ctx, pathParam(event, 'id'), trigger);
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
  'POST /v1/jobs/{id}/cancel': async (event, ctx) => ({
    status: 200,
    body: { job: await cancelJobNow(ctx, idParam(event, 'id', 'job')) },
  }),
  'POST /v1/jobs/{id}/approve': async (event, ctx) => ({
    status: 200,
    body: { job: await approveBlockedJob(ctx, idParam(event, 'id', 'job')) },
  }),
  'POST /v1/jobs/{id}/rerun': async (event, ctx) => {
    const { failed_only } = jsonBody(event, RerunSchema);
    const job = await rerunFinishedJob(ctx, idParam(event, 'id', 'job'), failed_only);
    return { status: 202, body: { job_id: job.id, number: job.number } };
  },
  'GET /v1/tasks/{id}/log': async (event, ctx) => {
    const { attempt, offset, limit } = queryParams(event, LogQuery);
    const log = await readTaskLog(ctx.pool, idParam(event, 'id', 'task'), attempt, offset, limit);
    return {
      status: 200,
      text: log.text,
      headers: {
        'x-log-attempt': String(log.attempt),
        'x-log-size': String(log.size),
        'x-log-end': String(log.end),
        ...(log.copiedFrom ? { 'x-log-copied-from': log.copiedFrom } : {}),
      },
    };
  },
  'POST /v1/workers': async (event, ctx) => ({
    status: 201,
    body: await createWorker(ctx.pool, jsonBody(event, WorkerCreateSchema)),
  }),
  'GET /v1/workers': async (_event, ctx) => ({
    status: 200,
    body: { workers: await listWorkers(ctx.pool) },
  }),
  'DELETE /v1/workers/{id}': async (event, ctx) => {
    await revokeWorker(ctx.pool, idParam(event, 'id', 'worker'));
    return { status: 204 };
  },
};

/** A page's form on a job goes through the admin route of the same name. */
const jobAction: JobAction = (action, jobId, body, event, ctx) => {
  const route = routes[`POST /v1/jobs/{id}/${action}`];
  if (!route) throw new NotFoundError(`no ${action} for jobs`);
  const json = {
    pathParameters: { id: jobId },
    body: JSON.stringify(body),
    isBase64Encoded: false,
  };
  return route({ ...event, ...json }, ctx);
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
  const ctx = await getContext();
  if (key === 'GET /v1/health') return { status: 200, body: await checkHealth(ctx.pool) };
  const pageRoute = PAGE_ROUTES[key];
  if (pageRoute) return pageRoute(event, ctx, jobAction);
  requireAdmin(event, ctx.adminToken);
  const route = routes[key];
  if (!route) throw new NotFoundError(`no route ${method} ${event.rawPath}`);
  return route(event, ctx);
}

export const handler = httpFunction(main);
