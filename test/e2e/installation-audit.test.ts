// The audit gaps of issue #46: deleting a cache wrote no row, and nothing
// recorded projects created, changed or deleted, workers registered or
// revoked, or sessions ended. Each is now a row: the cache delete in the
// project's audit, the rest in the installation's (GET /v1/audit, admin).
import assert from 'node:assert/strict';
import { createHash, randomUUID } from 'node:crypto';
import { test } from 'node:test';
import { createProject, createWorker, type Json, startE2E } from './calls.ts';

const { stack } = await startE2E(import.meta.filename);
const admin = { token: stack.adminToken };
const pool = stack.context.pool;

async function events(query = ''): Promise<Json[]> {
  const res = await stack.call('GET', `/v1/audit${query}`, admin);
  assert.equal(res.status, 200, res.text);
  return res.body.events;
}

test('deleting a cache is in the project audit, naming the key, the scope and the entries', async () => {
  await createProject(stack, {
    id: 'cached',
    name: 'cached',
    forge: 'github',
    repo: 'acme/cached',
    repo_url: 'https://github.com/acme/cached.git',
  });
  for (const scope of ['refs/heads/main', 'refs/heads/dev']) {
    await pool.query(
      `insert into caches (project_id, scope, key, storage_key, size, sha256, trusted, state, task_id, attempt)
       values ('cached', $1, 'deps-1', $2, 1, $3, true, 'ready', $4, 1)`,
      [scope, `caches/cached/${randomUUID()}`, createHash('sha256').digest('hex'), randomUUID()],
    );
  }
  const res = await stack.call('DELETE', '/v1/projects/cached/caches/deps-1', admin);
  assert.equal(res.status, 204, res.text);
  const audit = await stack.call('GET', '/v1/projects/cached/audit', admin);
  assert.deepEqual(
    audit.body.events.map((e: Json) => [e.actor, e.action, e.detail]),
    [['admin token', 'cache', 'deps-1 deleted in every scope (2 entries)']],
  );
});

test('projects, workers and sessions are in the installation audit, newest first, paged', async () => {
  await createProject(stack, {
    id: 'audited',
    name: 'audited',
    forge: 'github',
    repo: 'acme/audited',
    repo_url: 'https://github.com/acme/audited.git',
    org_groups: ['deploy'],
  });
  const patched = await stack.call('PATCH', '/v1/projects/audited', {
    ...admin,
    body: { org_groups: ['deploy', 'release'], name: 'Audited' },
  });
  assert.equal(patched.status, 200, patched.text);
  const res = await stack.call('POST', '/v1/workers', {
    ...admin,
    body: { name: 'deployer', labels: ['prod'], projects: ['audited'], ephemeral: true },
  });
  assert.equal(res.status, 201, res.text);
  const workerId = res.body.worker.id;
  assert.equal((await stack.call('DELETE', `/v1/workers/${workerId}`, admin)).status, 204);
  const { worker: wide } = await createWorker(stack, [], 'anywhere', { untrusted: true });
  const { rows } = await pool.query<{ id: string }>(
    `insert into sessions (token_hash, kind, forge, login, expires_at)
     values ($1, 'forge', 'github', 'mallory', now() + interval '1 hour') returning id`,
    [createHash('sha256').update(randomUUID()).digest()],
  );
  const sessionId = rows[0]!.id;
  assert.equal((await stack.call('DELETE', `/v1/sessions/${sessionId}`, admin)).status, 204);
  assert.equal((await stack.call('DELETE', '/v1/projects/audited', admin)).status, 204);

  // The first test's project is not this one's.
  const all = (await events('?limit=100')).filter((e) => e.subject !== 'cached');
  assert.deepEqual(
    all.map((e: Json) => [e.actor, e.action, e.subject, e.detail]),
    [
      ['admin token', 'project.delete', 'audited', 'github acme/audited'],
      ['admin token', 'session.revoke', sessionId, ''],
      ['admin token', 'worker.create', wide.id, 'anywhere: untrusted; labels none; every project'],
      [
        'admin token',
        'worker.revoke',
        workerId,
        'deployer: trusted, ephemeral; labels prod; projects audited',
      ],
      [
        'admin token',
        'worker.create',
        workerId,
        'deployer: trusted, ephemeral; labels prod; projects audited',
      ],
      ['admin token', 'project.update', 'audited', 'name, org_groups; org groups: deploy, release'],
      ['admin token', 'project.create', 'audited', 'github acme/audited, org groups deploy'],
    ],
  );
  // Paged: `before` an event's id answers the older ones.
  const [newest, second] = await events('?limit=2');
  const older = await events(`?limit=1&before=${second.id}`);
  assert.ok(newest.id > second.id && second.id > older[0].id);
  for (const e of [newest, ...older]) assert.match(e.at, /^\d{4}-\d{2}-\d{2}T/);
});

test("the installation audit is the admin token's alone", async () => {
  assert.equal((await stack.call('GET', '/v1/audit')).status, 401);
  assert.equal((await stack.call('GET', '/v1/audit', { token: 'cw_not-the-admin' })).status, 401);
  assert.equal((await stack.call('GET', '/v1/audit?limit=0', admin)).status, 400);
});
