// The project page shows, to a signed-in viewer, the workers that may claim
// the project's tasks and each one's scope (issue #28): a worker registered
// for every project is one whose stolen token reaches this project from any
// other. Anonymous viewers of a public project see none of it, nor (issue
// #46) a signed-in account without write permission on the repository.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { renderProject } from '../../lib/pages/lists.ts';
import { testDatabase } from '../helpers/db.ts';
import { makeProject } from '../helpers/fixtures.ts';

const { pool } = await testDatabase(import.meta.filename);

async function worker(name: string, projects: string[] | null, more: Record<string, unknown> = {}) {
  await pool.query(
    `insert into workers (name, token_hash, labels, projects, ephemeral, untrusted, revoked)
     values ($1, decode(md5(random()::text) || md5(random()::text), 'hex'), $2, $3, $4, $5, $6)`,
    [
      name,
      ['linux'],
      projects,
      more.ephemeral ?? false,
      more.untrusted ?? false,
      more.revoked ?? false,
    ],
  );
}

test("a project's page lists the workers that may claim its tasks with their scope, to the admin and writers only", async () => {
  const mine = await makeProject(pool);
  const other = await makeProject(pool);
  await worker('shared', null);
  await worker('mine-only', [mine]);
  await worker('both', [mine, other]);
  await worker('forks', [mine], { untrusted: true, ephemeral: true });
  await worker('elsewhere', [other]);
  await worker('gone', [mine], { revoked: true });

  const signedIn = await renderProject(pool, mine, { signedIn: true, workers: true }, undefined);
  const scope = (name: string) =>
    new RegExp(`data-worker="${name}">[\\s\\S]*?<td data-scope>([^<]*)</td>`).exec(signedIn)?.[1];
  assert.equal(scope('shared'), 'every project');
  assert.equal(scope('mine-only'), 'this project only');
  assert.equal(scope('both'), '2 projects');
  assert.equal(scope('forks'), 'this project only, one task');
  assert.equal(scope('elsewhere'), undefined, "another project's worker is not listed");
  assert.equal(scope('gone'), undefined, 'a revoked worker is not listed');

  const anonymous = await renderProject(pool, mine, { signedIn: false }, undefined);
  assert.doesNotMatch(anonymous, /data-worker=/);
  assert.doesNotMatch(anonymous, /<h2>Workers<\/h2>/);
  const reader = await renderProject(pool, mine, { signedIn: true, workers: false }, undefined);
  assert.doesNotMatch(reader, /data-worker=/);
  assert.doesNotMatch(reader, /<h2>Workers<\/h2>/);
});
