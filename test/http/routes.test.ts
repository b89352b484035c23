import assert from 'node:assert/strict';
import { test } from 'node:test';
import { matchRoute, ROUTES } from '../../lib/http/routes.ts';

test('every route of the table matches itself with its parameters', () => {
  for (const route of ROUTES) {
    const path = route.path.replace(/\{(\w+)\}/g, (_, name) => `value-of-${name}`);
    const match = matchRoute(route.method, path);
    assert.equal(match?.route, route, `${route.method} ${route.path}`);
    for (const name of route.path.match(/\{(\w+)\}/g) ?? []) {
      assert.equal(match?.params[name.slice(1, -1)], `value-of-${name.slice(1, -1)}`);
    }
  }
});

test('path parameters are decoded and may not be empty', () => {
  assert.deepEqual(matchRoute('PUT', '/v1/projects/demo/secrets/A%5FB')?.params, {
    id: 'demo',
    name: 'A_B',
  });
  assert.equal(matchRoute('GET', '/v1/projects/'), undefined);
  assert.equal(matchRoute('GET', '/v1/projects/%E0%A4%A'), undefined, 'bad escapes match nothing');
});

test('a route with another method, or an unknown path, matches nothing', () => {
  assert.equal(matchRoute('DELETE', '/v1/runner/claim'), undefined);
  assert.equal(matchRoute('GET', '/v1/projects/demo/jobs/extra'), undefined);
  assert.equal(matchRoute('GET', '/v1'), undefined);
});

test('each runner route has a function of its own and the admin routes go to the api', () => {
  const fn = (method: string, path: string) => matchRoute(method, path)?.route.fn;
  assert.equal(fn('POST', '/v1/runner/claim'), 'claim');
  assert.equal(fn('POST', '/v1/runner/tasks/x/heartbeat'), 'heartbeat');
  assert.equal(fn('POST', '/v1/runner/tasks/x/logs'), 'logs');
  assert.equal(fn('POST', '/v1/runner/tasks/x/complete'), 'complete');
  assert.equal(fn('POST', '/v1/webhooks/gitea'), 'webhook');
  assert.equal(fn('GET', '/v1/tasks/x/log'), 'api');
});
