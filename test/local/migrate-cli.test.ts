// `conductor migrate [repair]` (issue #49): applies the migrations to
// DATABASE_URL, says when there is nothing to do, refuses a changed applied
// migration naming it, and the repair records it so the next migrate goes on.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runCli } from '../../cli/main.ts';
import { loadMigrationSet } from '../../lib/db/index.ts';
import { testDatabase } from '../helpers/db.ts';

const db = await testDatabase(import.meta.filename, { migrate: false });
const latest = loadMigrationSet().migrations.at(-1)!;

async function conductor(args: string[]) {
  const lines: string[] = [];
  const code = await runCli(args, {
    out: (l) => lines.push(l),
    env: { DATABASE_URL: db.url },
  });
  return { code, out: lines.join('\n') };
}

test('conductor migrate applies the migrations, then has nothing to do', async () => {
  const first = await conductor(['migrate']);
  assert.equal(first.code, 0, first.out);
  assert.match(first.out, new RegExp(`database is at migration ${latest.id},`));
  const { rows } = await db.pool.query('select max(id)::int as id from conductor_migrations');
  assert.equal(rows[0].id, latest.id);
  const again = await conductor(['migrate']);
  assert.equal(again.code, 0, again.out);
  assert.equal(again.out, `database is up to date (migration ${latest.id})`);
});

test('a changed applied migration: conductor migrate refuses naming it, conductor migrate repair records it', async () => {
  const file = '019_check_domains.sql';
  await db.pool.query("update conductor_migrations set checksum = repeat('0', 64) where id = 19");
  const refused = await conductor(['migrate']);
  assert.equal(refused.code, 1, refused.out);
  assert.match(refused.out, new RegExp(`migration ${file} was changed after it was applied`));

  const repair = await conductor(['migrate', 'repair']);
  assert.equal(repair.code, 0, repair.out);
  assert.match(repair.out, new RegExp(`recorded ${file} as it is now`));
  assert.match(repair.out, /repaired 1 migration\(s\); "conductor migrate" or the server's start/);
  const { rows } = await db.pool.query(
    'select checksum_source from conductor_migrations where id = 19',
  );
  assert.equal(rows[0].checksum_source, 'repaired');

  const nothing = await conductor(['migrate', 'repair']);
  assert.equal(nothing.out, 'every applied migration matches its file: nothing to repair');
  const after = await conductor(['migrate']);
  assert.equal(after.code, 0, after.out);
  assert.equal(after.out, `database is up to date (migration ${latest.id})`);
});

test('conductor migrate takes no other command', async () => {
  const wrong = await conductor(['migrate', 'undo']);
  assert.equal(wrong.code, 2, wrong.out);
});
