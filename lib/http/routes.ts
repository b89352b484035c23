// Every route of the HTTP contract and the function that serves it. The local
// server and the deployment (infra/) both read this table, so a route cannot
// go to one function here and another in AWS.

export type FunctionName = 'webhook' | 'claim' | 'heartbeat' | 'logs' | 'complete' | 'api';

export interface Route {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  /** API Gateway syntax: `{name}` is one path segment. */
  path: string;
  fn: FunctionName;
}

export const ROUTES: readonly Route[] = [
  { method: 'POST', path: '/v1/webhooks/github', fn: 'webhook' },
  { method: 'POST', path: '/v1/webhooks/gitea', fn: 'webhook' },
  { method: 'POST', path: '/v1/webhooks/gitlab', fn: 'webhook' },
  { method: 'POST', path: '/v1/runner/claim', fn: 'claim' },
  { method: 'POST', path: '/v1/runner/tasks/{id}/heartbeat', fn: 'heartbeat' },
  { method: 'POST', path: '/v1/runner/tasks/{id}/logs', fn: 'logs' },
  { method: 'POST', path: '/v1/runner/tasks/{id}/complete', fn: 'complete' },
  { method: 'GET', path: '/v1/health', fn: 'api' },
  { method: 'GET', path: '/v1/ready', fn: 'api' },
  { method: 'POST', path: '/v1/projects', fn: 'api' },
  { method: 'GET', path: '/v1/projects', fn: 'api' },
  { method: 'GET', path: '/v1/projects/{id}', fn: 'api' },
  { method: 'PATCH', path: '/v1/projects/{id}', fn: 'api' },
  { method: 'DELETE', path: '/v1/projects/{id}', fn: 'api' },
  { method: 'POST', path: '/v1/projects/{id}/webhook-secret', fn: 'api' },
  { method: 'GET', path: '/v1/projects/{id}/audit', fn: 'api' },
  { method: 'GET', path: '/v1/projects/{id}/secrets', fn: 'api' },
  { method: 'PUT', path: '/v1/projects/{id}/secrets/{name}', fn: 'api' },
  { method: 'DELETE', path: '/v1/projects/{id}/secrets/{name}', fn: 'api' },
  { method: 'GET', path: '/v1/projects/{id}/jobs', fn: 'api' },
  { method: 'POST', path: '/v1/projects/{id}/jobs', fn: 'api' },
  // Notifications (docs/api.md, "Notifications"): the admin's.
  { method: 'POST', path: '/v1/projects/{id}/notifications', fn: 'api' },
  { method: 'GET', path: '/v1/projects/{id}/notifications', fn: 'api' },
  { method: 'DELETE', path: '/v1/projects/{id}/notifications/{nid}', fn: 'api' },
  { method: 'POST', path: '/v1/projects/{id}/schedules', fn: 'api' },
  { method: 'GET', path: '/v1/projects/{id}/schedules', fn: 'api' },
  { method: 'PATCH', path: '/v1/projects/{id}/schedules/{name}', fn: 'api' },
  { method: 'DELETE', path: '/v1/projects/{id}/schedules/{name}', fn: 'api' },
  { method: 'GET', path: '/v1/jobs/{id}', fn: 'api' },
  { method: 'POST', path: '/v1/jobs/{id}/cancel', fn: 'api' },
  { method: 'POST', path: '/v1/jobs/{id}/approve', fn: 'api' },
  { method: 'POST', path: '/v1/jobs/{id}/rerun', fn: 'api' },
  { method: 'POST', path: '/v1/jobs/{id}/tasks/{name}/unblock', fn: 'api' },
  { method: 'GET', path: '/v1/tasks/{id}/log', fn: 'api' },
  { method: 'POST', path: '/v1/workers', fn: 'api' },
  { method: 'GET', path: '/v1/workers', fn: 'api' },
  { method: 'DELETE', path: '/v1/workers/{id}', fn: 'api' },
  // Runner pools (docs/runner.md, "Runner pools"): the admin's.
  { method: 'POST', path: '/v1/pools', fn: 'api' },
  { method: 'GET', path: '/v1/pools', fn: 'api' },
  { method: 'PATCH', path: '/v1/pools/{name}', fn: 'api' },
  { method: 'DELETE', path: '/v1/pools/{name}', fn: 'api' },
  { method: 'GET', path: '/v1/sessions', fn: 'api' },
  { method: 'DELETE', path: '/v1/sessions/{id}', fn: 'api' },
  { method: 'GET', path: '/v1/audit', fn: 'api' },
  // Artifacts and caches (docs/artifacts.md): people's routes, then the
  // runner's (lease-checked like heartbeat and complete), on the api function.
  { method: 'GET', path: '/v1/jobs/{id}/artifacts', fn: 'api' },
  { method: 'GET', path: '/v1/artifacts/{id}', fn: 'api' },
  { method: 'GET', path: '/v1/projects/{id}/caches', fn: 'api' },
  { method: 'DELETE', path: '/v1/projects/{id}/caches/{key}', fn: 'api' },
  { method: 'POST', path: '/v1/runner/tasks/{id}/artifacts', fn: 'api' },
  { method: 'POST', path: '/v1/runner/tasks/{id}/artifacts/{artifact}/commit', fn: 'api' },
  { method: 'POST', path: '/v1/runner/tasks/{id}/needs-artifacts', fn: 'api' },
  { method: 'POST', path: '/v1/runner/tasks/{id}/caches/restore', fn: 'api' },
  { method: 'POST', path: '/v1/runner/tasks/{id}/caches/save', fn: 'api' },
  { method: 'POST', path: '/v1/runner/tasks/{id}/caches/{cache}/commit', fn: 'api' },
  { method: 'GET', path: '/jobs/{id}/artifacts/{artifact}', fn: 'api' },
  // Test reports (docs/pipeline.md#reports-test-results): the job's tests, then
  // the runner's uploads (lease-checked, as artifacts').
  { method: 'GET', path: '/v1/jobs/{id}/tests', fn: 'api' },
  { method: 'POST', path: '/v1/runner/tasks/{id}/reports', fn: 'api' },
  { method: 'POST', path: '/v1/runner/tasks/{id}/reports/{report}/commit', fn: 'api' },
  // The web pages (lib/pages), served by the api function too.
  { method: 'GET', path: '/', fn: 'api' },
  { method: 'GET', path: '/login', fn: 'api' },
  { method: 'POST', path: '/login', fn: 'api' },
  { method: 'GET', path: '/login/{forge}', fn: 'api' },
  { method: 'GET', path: '/login/{forge}/callback', fn: 'api' },
  { method: 'POST', path: '/logout', fn: 'api' },
  { method: 'GET', path: '/projects/{id}', fn: 'api' },
  { method: 'GET', path: '/projects/{id}/badge.svg', fn: 'api' },
  { method: 'POST', path: '/projects/{id}/run', fn: 'api' },
  { method: 'GET', path: '/jobs/{id}', fn: 'api' },
  { method: 'GET', path: '/jobs/{id}/live', fn: 'api' },
  { method: 'GET', path: '/jobs/{id}/log', fn: 'api' },
  { method: 'GET', path: '/jobs/{id}/raw', fn: 'api' },
  { method: 'POST', path: '/jobs/{id}/cancel', fn: 'api' },
  { method: 'POST', path: '/jobs/{id}/rerun', fn: 'api' },
  { method: 'POST', path: '/jobs/{id}/approve', fn: 'api' },
  { method: 'POST', path: '/jobs/{id}/tasks/{name}/unblock', fn: 'api' },
  // Adding a project, and a project's settings (lib/pages/onboard.ts, settings.ts).
  { method: 'GET', path: '/repositories', fn: 'api' },
  { method: 'POST', path: '/repositories', fn: 'api' },
  { method: 'GET', path: '/projects/{id}/settings', fn: 'api' },
  { method: 'POST', path: '/projects/{id}/settings', fn: 'api' },
  { method: 'POST', path: '/projects/{id}/settings/secrets', fn: 'api' },
  { method: 'POST', path: '/projects/{id}/settings/secrets/{name}/delete', fn: 'api' },
  { method: 'POST', path: '/projects/{id}/settings/notifications', fn: 'api' },
  { method: 'POST', path: '/projects/{id}/settings/notifications/{nid}/delete', fn: 'api' },
  { method: 'POST', path: '/projects/{id}/settings/schedules', fn: 'api' },
  { method: 'POST', path: '/projects/{id}/settings/schedules/{name}', fn: 'api' },
  { method: 'POST', path: '/projects/{id}/settings/schedules/{name}/delete', fn: 'api' },
  { method: 'POST', path: '/projects/{id}/settings/workers/{worker}/revoke', fn: 'api' },
  { method: 'POST', path: '/projects/{id}/delete', fn: 'api' },
];

/** The API Gateway route key of a route, e.g. `POST /v1/projects/{id}`. */
export function routeKey(route: Route): string {
  return `${route.method} ${route.path}`;
}

export interface Match {
  route: Route;
  params: Record<string, string>;
}

/** Finds the route for a method and path, with its path parameters decoded. */
export function matchRoute(method: string, path: string): Match | undefined {
  const segments = path.split('/');
  for (const route of ROUTES) {
    if (route.method !== method) continue;
    const pattern = route.path.split('/');
    if (pattern.length !== segments.length) continue;
    const params: Record<string, string> = {};
    let ok = true;
    for (let i = 0; i < pattern.length && ok; i++) {
      const p = pattern[i]!;
      const s = segments[i]!;
      if (p.startsWith('{') && p.endsWith('}')) {
        if (s === '') ok = false;
        else {
          try {
            params[p.slice(1, -1)] = decodeURIComponent(s);
          } catch {
            ok = false;
          }
        }
      } else if (p !== s) ok = false;
    }
    if (ok) return { route, params };
  }
  return undefined;
}
