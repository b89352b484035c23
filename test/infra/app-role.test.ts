// The functions connect as a role that reads and writes the data but cannot
// change the schema; the migrations, as the owner, grant it every table.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, test } from 'node:test';
import pg from 'pg';
import { grantAppRole } from '../../infra/migrate-handler.ts';
import { createPool } from '../../lib/db/index.ts';
import { adminQuery } from '../../local/postgres.ts';
import { adminUrl, testDatabase } from '../helpers/db.ts';

const db = await testDatabase(import.meta.filename);
// Roles are cluster-wide: one of this run's own.
const role = `conductor_app_${randomBytes(4).toString('hex')}`;
after(async () => {
  await db.pool.query(`drop owned by ${role}`).catch(() => {});
  await adminQuery(adminUrl(), `drop role if exists ${role}`).catch(() => {});
});

test('the application role reads and writes, and cannot create, alter or drop', async () => {
  await grantAppRole(db.pool, role);
  await grantAppRole(db.pool, role);
  // Deployed it signs in with an IAM token; here, with a password the test gives it.
  await db.pool.query(`alter role ${role} password 'app-password'`);
  const url = new URL(db.url);
  url.username = role;
  url.password = 'app-password';
  const app = createPool({ url: url.toString(), max: 1 });
  after(() => app.end());
  await app.query(`insert into workers (name, token_hash, labels) values ('w', $1, '{}')`, [
    randomBytes(32),
  ]);
  assert.equal((await app.query('select count(*)::int as n from workers')).rows[0].n, 1);
  for (const ddl of [
    'create table intruder (id int)',
    'alter table workers add column intruder int',
    'drop table workers',
    'truncate workers',
  ]) {
    await assert.rejects(
      app.query(ddl),
      (e) => e instanceof pg.DatabaseError && /permission denied|must be owner/.test(e.message),
      ddl,
    );
  }
});
