// Schedules after trouble (issue #29 review): a long gap fires the latest tick once,
// schedules that keep failing do not starve the others, and a failure that is
// not the forge being away says so in last_error.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, test } from 'node:test';
import { createSchedule, fireDueSchedules, ScheduleCreateSchema } from '../../lib/app/schedules.ts';
import { createProject } from '../e2e/calls.ts';
import { testStack } from '../helpers/stack.ts';

const stack = await testStack(import.meta.filename);
const ctx = stack.context;
const pool = ctx.pool;
const repo = await mkdtemp(join(tmpdir(), 'sched-catchup-'));
after(() => rm(repo, { recursive: true, force: true }));
const git = (...args: string[]) =>
  execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', ...args], { cwd: repo })
    .toString()
    .trim();
git('init', '-q', '-b', 'main');
await writeFile(join(repo, '.conductor.yml'), 'version: 1\ntasks:\n  build:\n    script: [make]\n');
git('add', '.');
git('commit', '-q', '-m', 'pipeline');

afterEach(() => pool.query('update schedules set enabled = false, due_at = null'));

const at = (iso: string) => new Date(iso);

test("50 schedules whose forge is down do not keep another project's schedule from firing; they wait, keeping their tick, saying why", async () => {
  await createProject(stack, {
    id: 'dead',
    name: 'dead',
    forge: 'gitea',
    repo: 'acme/dead',
    repo_url: 'https://gitea.invalid/acme/dead.git',
    forge_url: 'http://127.0.0.1:9',
  });
  await createProject(stack, {
    id: 'healthy',
    name: 'healthy',
    forge: 'github',
    repo: 'acme/healthy',
    repo_url: repo,
  });
  for (let i = 0; i < 50; i++) {
    await createSchedule(
      ctx,
      'dead',
      ScheduleCreateSchema.parse({ name: `h${i}`, cron: '@hourly', ref: 'main' }),
      at('2026-06-01T00:10:00Z'),
    );
  }
  await createSchedule(
    ctx,
    'healthy',
    ScheduleCreateSchema.parse({ name: 'nightly', cron: '30 1 * * *', ref: 'main' }),
    at('2026-06-01T00:10:00Z'),
  );
  // Every minute from 01:31 to 01:40, the sweep's tick: the healthy schedule (due 01:30) should fire.
  for (let m = 31; m <= 40; m++) {
    await fireDueSchedules(ctx, at(`2026-06-01T01:${m}:45Z`));
  }
  const { rows } = await pool.query(
    `select count(*)::int as n from jobs where project_id = 'healthy'`,
  );
  const s = await pool.query(`select next_run_at from schedules where project_id = 'healthy'`);
  const d = await pool.query(
    `select next_run_at, last_error from schedules where project_id = 'dead' limit 1`,
  );
  assert.equal(
    rows[0].n,
    1,
    `the healthy project's schedule never fired; it is still at ${s.rows[0].next_run_at?.toISOString()}; a dead one: ${d.rows[0].next_run_at?.toISOString()} ${d.rows[0].last_error}`,
  );
  // What the project page shows of a dead one: still its 01:00 tick, and why it waits.
  assert.equal(d.rows[0].next_run_at.toISOString(), '2026-06-01T01:00:00.000Z');
  assert.match(d.rows[0].last_error, /tried again at 2026-06-01T0\d:\d\d/);
});

test('fireDueSchedules starts nothing once the sweep deadline has passed; the schedule stays due', async () => {
  await createProject(stack, {
    id: 'late',
    name: 'late',
    forge: 'github',
    repo: 'acme/late',
    repo_url: repo,
  });
  await createSchedule(
    ctx,
    'late',
    ScheduleCreateSchema.parse({ name: 'n', cron: '0 3 * * *', ref: 'main' }),
    at('2026-06-01T00:10:00Z'),
  );
  const short = await fireDueSchedules(ctx, at('2026-06-01T03:05:00Z'), {
    deadline: Date.now() - 1,
  });
  assert.equal(short.schedules_fired, 0);
  // The local stack's deadline under the defaults: the next sweep, 10 s away
  // (this once fired nothing: a 10 s margin of the schedules' own ate it).
  const full = await fireDueSchedules(ctx, at('2026-06-01T03:05:00Z'), {
    deadline: Date.now() + 10_000,
  });
  assert.equal(full.schedules_fired, 1);
});

test('a schedule that cannot fire for a reason other than the forge being away says so in last_error and moves to its next tick', async () => {
  await createProject(stack, {
    id: 'sealed',
    name: 'sealed',
    forge: 'github',
    repo: 'acme/sealed',
    repo_url: 'https://github.com/acme/sealed.git',
  });
  await createSchedule(
    ctx,
    'sealed',
    ScheduleCreateSchema.parse({ name: 'nightly', cron: '0 3 * * *', ref: 'main' }),
    at('2026-06-01T00:10:00Z'),
  );
  // The project's forge token can no longer be opened (the keyring's old key dropped after a rotation).
  await pool.query(`update projects set forge_token_enc = 'v1:gone:AAAA' where id = 'sealed'`);
  for (const m of [1, 2, 3]) await fireDueSchedules(ctx, at(`2026-06-0${m + 1}T03:05:00Z`));
  const s = await pool.query(
    `select next_run_at, last_error from schedules where project_id = 'sealed'`,
  );
  const jobs = await pool.query(`select state, error from jobs where project_id = 'sealed'`);
  assert.ok(
    s.rows[0].last_error !== null || jobs.rows.length > 0,
    `three days of nightly ticks: no job, no last_error; next_run_at still ${s.rows[0].next_run_at.toISOString()}`,
  );
  assert.equal(jobs.rows.length, 0);
  assert.match(
    s.rows[0].last_error,
    /^schedule nightly: the tick of 2026-06-04T03:00:00.000Z did not fire: /,
  );
  // It moved on to its next tick rather than staying due at the first.
  assert.equal(s.rows[0].next_run_at.toISOString(), '2026-06-05T03:00:00.000Z');
});

test('catch_up: latest: a @monthly schedule back after four months fires once, not once per missed month', async () => {
  await createProject(stack, {
    id: 'monthly',
    name: 'monthly',
    forge: 'github',
    repo: 'acme/monthly',
    repo_url: repo,
  });
  await createSchedule(
    ctx,
    'monthly',
    ScheduleCreateSchema.parse({ name: 'm', cron: '@monthly', ref: 'main' }),
    at('2026-01-15T00:00:00Z'),
  );
  // Down from 31 January to 15 June; then the sweep's tick every minute.
  for (let m = 0; m < 6; m++) await fireDueSchedules(ctx, at(`2026-06-15T12:0${m}:45Z`));
  const { rows } = await pool.query<{ tick: Date }>(
    `select t.tick from schedule_ticks t join schedules s on s.id = t.schedule_id where s.project_id = 'monthly' order by t.tick`,
  );
  assert.deepEqual(
    rows.map((r) => r.tick.toISOString()),
    ['2026-06-01T00:00:00.000Z'],
  );
});

test('catch_up: latest: a @weekly schedule back after three weeks fires once, whatever the hour of the return', async () => {
  await createProject(stack, {
    id: 'weekly',
    name: 'weekly',
    forge: 'github',
    repo: 'acme/weekly',
    repo_url: repo,
  });
  // @weekly: Sundays 00:00 UTC. 2026-06-07 is a Sunday.
  await createSchedule(
    ctx,
    'weekly',
    ScheduleCreateSchema.parse({ name: 'w', cron: '@weekly', ref: 'main' }),
    at('2026-06-03T00:00:00Z'),
  );
  // Back on Saturday 27 June at 23:30, half an hour before the next tick.
  for (let m = 0; m < 4; m++) await fireDueSchedules(ctx, at(`2026-06-27T23:3${m}:45Z`));
  const { rows } = await pool.query<{ tick: Date }>(
    `select t.tick from schedule_ticks t join schedules s on s.id = t.schedule_id where s.project_id = 'weekly' order by t.tick`,
  );
  assert.deepEqual(
    rows.map((r) => r.tick.toISOString()),
    ['2026-06-21T00:00:00.000Z'],
  );
});
