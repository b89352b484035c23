// The cache quota's eviction (lib/storage/rows.ts, evictCaches) on real rows:
// a trusted save makes room among all entries, stale first, then the least
// recently used; an untrusted job's save makes room among untrusted entries
// only, itself included, so a fork's saves never push main's caches out.
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { test } from 'node:test';
import { evictCaches } from '../../lib/storage/index.ts';
import { testDatabase } from '../helpers/db.ts';
import { makeProject } from '../helpers/fixtures.ts';

const db = await testDatabase(import.meta.filename);
const { pool } = db;
const STALE_S = 7 * 24 * 3600;

/** A ready entry named `name` of `size` bytes, last used `ageS` seconds ago. */
async function entry(project: string, name: string, size: number, trusted: boolean, ageS: number) {
  await pool.query(
    `insert into caches (project_id, scope, key, storage_key, size, sha256, trusted, state,
                         task_id, attempt, last_used_at)
     values ($1, $2, $3, $4, $5, $6, $7, 'ready', $8, 1, now() - make_interval(secs => $9))`,
    [
      project,
      trusted ? 'refs/heads/main' : 'untrusted:refs/pull/7/head',
      name,
      `caches/${project}/${name}`,
      size,
      randomBytes(32).toString('hex'),
      trusted,
      randomUUID(),
      ageS,
    ],
  );
  const { rows } = await pool.query<{ id: string }>(
    'select id from caches where project_id = $1 and key = $2',
    [project, name],
  );
  return rows[0]!.id;
}

async function left(project: string): Promise<string[]> {
  const { rows } = await pool.query<{ key: string }>(
    'select key from caches where project_id = $1 order by key',
    [project],
  );
  return rows.map((r) => r.key);
}

test("an untrusted save evicts the older untrusted entry, not main's older trusted one", async () => {
  const project = await makeProject(pool);
  await entry(project, 'main-deps', 300, true, 3600 * 5);
  await entry(project, 'fork-old', 200, false, 3600);
  await entry(project, 'fork-new', 200, false, 0);
  // 700 bytes against 600: before, the least recently used (main's) went.
  const evicted = await evictCaches(pool, project, 600, STALE_S, null, true);
  assert.deepEqual(evicted, [`caches/${project}/fork-old`]);
  assert.deepEqual(await left(project), ['fork-new', 'main-deps']);
});

test('an untrusted save that only trusted entries could make room for is evicted itself', async () => {
  const project = await makeProject(pool);
  await entry(project, 'main-deps', 500, true, 3600 * 24 * 30);
  await entry(project, 'fork-new', 200, false, 0);
  const evicted = await evictCaches(pool, project, 600, STALE_S, null, true);
  assert.deepEqual(evicted, [`caches/${project}/fork-new`]);
  assert.deepEqual(await left(project), ['main-deps']);
});

test('a trusted save evicts stale entries first, then the least recently used, of either kind, never itself', async () => {
  const project = await makeProject(pool);
  await entry(project, 'fork-recent', 200, false, 60);
  await entry(project, 'main-stale', 200, true, STALE_S + 3600);
  await entry(project, 'main-older', 200, true, 3600);
  const kept = await entry(project, 'main-new', 300, true, 0);
  // 900 bytes against 500: the stale entry, then the least recently used.
  const evicted = await evictCaches(pool, project, 500, STALE_S, kept, false);
  assert.deepEqual(evicted.sort(), [
    `caches/${project}/main-older`,
    `caches/${project}/main-stale`,
  ]);
  assert.deepEqual(await left(project), ['fork-recent', 'main-new']);
});
