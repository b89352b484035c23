import { z } from 'zod';
import { requireAdmin } from '../lib/auth.ts';
import { type AppContext, getContext } from '../lib/context.ts';
import { dispatchCompile } from '../lib/dispatch.ts';
import { NotFoundError } from '../lib/errors.ts';
import {
  type HttpEvent,
  httpFunction,
  idParam,
  jsonBody,
  pathParam,
  queryParams,
  type Reply,
} from '../lib/http/index.ts';
import { matchRoute } from '../lib/http/routes.ts';
import { MAX_LOG_PAGE_BYTES, readLog } from '../lib/logs.ts';
import { type JobAction, PAGE_ROUTES } from '../lib/pages/index.ts';
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
} from '../lib/projects.ts';
import { approveJob, cancelJob, createJob, rerunJob } from '../lib/scheduler/index.ts';
import { deliverJobStatus } from '../lib/statuses.ts';
import { getJobOnly, getJobView, listJobs } from '../lib/views.ts';
import { createWorker, listWorkers, revokeWorker, WorkerCreateSchema } from '../lib/workers.ts';

const SHA = /^[0-9a-f]{40}([0-9a-f]{24})?$/;

export const TriggerSchema = z.strictObject({
  ref: z
    .string()
    .min(1)
    .max(1024)
    .refine((r) => !/\s/.test(r), 'must not contain white space'),
  sha: z
    .string()
    .transform((s) => s.toLowerCase())
    .refine((s) => SHA.test(s), 'must be a full commit sha (40 or 64 hex digits)'),
});
export const RerunSchema = z.strictObject({ failed_only: z.boolean().default(false) });
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
    await getProject(ctx.pool, projectId);
    return { status: 200, body: { jobs: await listJobs(ctx.pool, projectId, limit, before) } };
  },
  'POST /v1/projects/{id}/jobs': async (event, ctx) => {
    const { ref, sha } = jsonBody(event, TriggerSchema);
    const projectId = pathParam(event, 'id');
    await getProject(ctx.pool, projectId);
    const fullRef = ref.startsWith('refs/') ? ref : `refs/heads/${ref}`;
    const { job, superseded } = await createJob(ctx.pool, {
      projectId,
      ref: fullRef,
      sha,
      trigger: 'manual',
      trusted: true,
    });
    for (const cancelled of superseded) await deliverJobStatus(ctx, cancelled);
    await dispatchCompile(ctx, job.id);
    return { status: 202, body: { job_id: job.id, number: job.number } };
  },
  'GET /v1/jobs/{id}': async (event, ctx) => ({
    status: 200,
    body: await getJobView(ctx.pool, idParam(event, 'id', 'job')),
  }),
  'POST /v1/jobs/{id}/cancel': async (event, ctx) => {
    const jobId = idParam(event, 'id', 'job');
    await cancelJob(ctx.pool, jobId, 'cancelled through the API');
    await deliverJobStatus(ctx, jobId);
    return { status: 200, body: { job: await getJobOnly(ctx.pool, jobId) } };
  },
  'POST /v1/jobs/{id}/approve': async (event, ctx) => {
    const jobId = idParam(event, 'id', 'job');
    await approveJob(ctx.pool, jobId);
    // Answered as approved (pending); the compile goes on after this.
    const job = await getJobOnly(ctx.pool, jobId);
    await dispatchCompile(ctx, jobId);
    return { status: 200, body: { job } };
  },
  'POST /v1/jobs/{id}/rerun': async (event, ctx) => {
    const { failed_only } = jsonBody(event, RerunSchema);
    const rerun = await rerunJob(ctx.pool, idParam(event, 'id', 'job'), failed_only);
    if (rerun.dispatch) await dispatchCompile(ctx, rerun.job.id);
    else await deliverJobStatus(ctx, rerun.job.id);
    return { status: 202, body: { job_id: rerun.job.id, number: rerun.job.number } };
  },
  'GET /v1/tasks/{id}/log': async (event, ctx) => {
    const { attempt, offset, limit } = queryParams(event, LogQuery);
    const log = await readLog(ctx.pool, idParam(event, 'id', 'task'), attempt, offset, limit);
    return {
      status: 200,
      text: log.text,
      headers: {
        'x-log-attempt': String(log.attempt),
        'x-log-size': String(log.size),
        'x-log-end': String(log.end),
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
  if (key === 'GET /v1/health') {
    await ctx.pool.query('select 1');
    return { status: 200, body: { ok: true } };
  }
  const pageRoute = PAGE_ROUTES[key];
  if (pageRoute) return pageRoute(event, ctx, jobAction);
  requireAdmin(event, ctx.adminToken);
  const route = routes[key];
  if (!route) throw new NotFoundError(`no route ${method} ${event.rawPath}`);
  return route(event, ctx);
}

export const handler = httpFunction(main);
