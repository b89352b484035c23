// Schedules end to end (issue #29), on real PostgreSQL, with the clock driven
// by the test (no test waits a minute): the API's contract, exactly one job
// per tick with two tickers racing (each order forced), the daylight-saving
// cases, one job after a gap, a deleted branch, a broken pipeline, a
// disabled project, and inputs and `when:` reaching a scheduled job. The
// project's repository is a git repository on this machine, so the ref's
// head is read with git (lib/forge/branch.ts's local path).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, test } from 'node:test';
import pg from 'pg';
import { createSchedule, fireDueSchedules, ScheduleCreateSchema } from '../../lib/app/schedules.ts';
import type { AppContext } from '../../lib/context.ts';
import { jitterSeconds } from '../../lib/schedules/cron.ts';
import { createProject, getJob, waitForJob } from '../e2e/calls.ts';
import { racePool, sleep, untilWaiting } from '../helpers/race.ts';
import { testStack } from '../helpers/stack.ts';

const stack = await testStack(import.meta.filename);
const ctx = stack.context;
const pool = ctx.pool;
const repo = await mkdtemp(join(tmpdir(), 'conductor-schedules-'));
after(() => rm(repo, { recursive: true, force: true }));

const git = (...args: string[]) =>
  execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', ...args], { cwd: repo })
    .toString()
    .trim();
git('init', '-q', '-b', 'main');
await writeFile(
  join(repo, '.conductor.yml'),
  `version: 1
inputs:
  env:
    type: choice
    options: [staging, prod]
    default: staging
tasks:
  build:
    script: ["echo \${{ inputs.env }}"]
  nightly:
    when: {trigger: [schedule], schedule: [nightly]}
    script: [./long-tests]
`,
);
git('add', '.');
git('commit', '-q', '-m', 'pipeline');
const mainSha = git('rev-parse', 'HEAD');
git('checkout', '-q', '-b', 'broken');
await writeFile(join(repo, '.conductor.yml'), 'version: 1\ntasks:\n  build: {scrip: [make]}\n');
git('commit', '-q', '-am', 'broken pipeline');
git('checkout', '-q', 'main');

// The schedules of one test are not the next one's: the tick fires every
// due schedule of the database, and each test's clock is its own.
afterEach(() => pool.query('update schedules set enabled = false, due_at = null'));

let projects = 0;
async function newProject(): Promise<string> {
  const id = `sched-${++projects}`;
  await createProject(stack, {
    id,
    name: id,
    forge: 'github',
    repo: `acme/${id}`,
    repo_url: repo,
  });
  return id;
}

/** A schedule made through the use case, with the test's clock as its `now`. */
async function schedule(projectId: string, body: Record<string, unknown>, now: Date) {
  return createSchedule(ctx, projectId, ScheduleCreateSchema.parse(body), now);
}

async function jobsOf(projectId: string) {
  const { rows } = await pool.query<{
    id: string;
    state: string;
    trigger: string;
    ref: string;
    sha: string;
    error: string | null;
    schedule_name: string | null;
  }>('select * from jobs where project_id = $1 order by number', [projectId]);
  return rows;
}

async function stored(projectId: string, name: string) {
  const { rows } = await pool.query('select * from schedules where project_id = $1 and name = $2', [
    projectId,
    name,
  ]);
  return rows[0];
}

async function ticks(projectId: string): Promise<string[]> {
  const { rows } = await pool.query<{ tick: Date }>(
    `select t.tick from schedule_ticks t join schedules s on s.id = t.schedule_id
      where s.project_id = $1 order by t.tick`,
    [projectId],
  );
  return rows.map((r) => r.tick.toISOString());
}

const at = (iso: string) => new Date(iso);
/** A moment safely past a tick's jitter. */
const past = (iso: string) => new Date(new Date(iso).getTime() + 40_000);

test('the schedules API: create answers next_run_at, bad cron and time zone name the field, list, change, delete', async () => {
  const id = await newProject();
  const token = stack.adminToken;
  const created = await stack.call('POST', `/v1/projects/${id}/schedules`, {
    token,
    body: {
      name: 'nightly',
      cron: '0 3 * * *',
      timezone: 'Europe/Berlin',
      inputs: { env: 'prod' },
    },
  });
  assert.equal(created.status, 201, created.text);
  const s = created.body.schedule;
  assert.equal(s.name, 'nightly');
  assert.equal(s.timezone, 'Europe/Berlin');
  assert.equal(s.ref, null);
  assert.deepEqual(s.inputs, { env: 'prod' });
  assert.equal(s.enabled, true);
  assert.equal(s.last_run_at, null);
  assert.equal(s.last_job_id, null);
  assert.equal(s.last_error, null);
  // 03:00 in Berlin is 01:00 or 02:00 UTC.
  assert.match(s.next_run_at, /T0[12]:00:00\.000Z$/);

  const badCron = await stack.call('POST', `/v1/projects/${id}/schedules`, {
    token,
    body: { name: 'x', cron: '0 3 * *' },
  });
  assert.equal(badCron.status, 400);
  assert.match(badCron.body.error.message, /cron: must have 5 fields/);
  const badZone = await stack.call('POST', `/v1/projects/${id}/schedules`, {
    token,
    body: { name: 'x', cron: '@daily', timezone: 'Mars/Olympus' },
  });
  assert.equal(badZone.status, 400);
  assert.match(badZone.body.error.message, /timezone: "Mars\/Olympus" is not an IANA time zone/);
  const again = await stack.call('POST', `/v1/projects/${id}/schedules`, {
    token,
    body: { name: 'nightly', cron: '@daily' },
  });
  assert.equal(again.status, 409);

  const list = await stack.call('GET', `/v1/projects/${id}/schedules`, { token });
  assert.equal(list.status, 200);
  assert.deepEqual(
    list.body.schedules.map((x: { name: string }) => x.name),
    ['nightly'],
  );
  const off = await stack.call('PATCH', `/v1/projects/${id}/schedules/nightly`, {
    token,
    body: { enabled: false },
  });
  assert.equal(off.status, 200, off.text);
  assert.equal(off.body.schedule.enabled, false);
  assert.equal(off.body.schedule.next_run_at, null, 'a disabled schedule has no next run');
  const on = await stack.call('PATCH', `/v1/projects/${id}/schedules/nightly`, {
    token,
    body: { enabled: true, cron: '@hourly' },
  });
  assert.match(on.body.schedule.next_run_at, /:00:00\.000Z$/);
  assert.equal(
    (await stack.call('DELETE', `/v1/projects/${id}/schedules/nightly`, { token })).status,
    204,
  );
  assert.equal(
    (await stack.call('DELETE', `/v1/projects/${id}/schedules/nightly`, { token })).status,
    404,
  );
  assert.equal((await stack.call('GET', `/v1/projects/nope/schedules`, { token })).status, 404);
  // Each change is in the project's audit, by who made it.
  const audit = await stack.call('GET', `/v1/projects/${id}/audit`, { token });
  assert.deepEqual(
    audit.body.events.map((e: { actor: string; action: string; detail: string }) => [
      e.actor,
      e.action,
      e.detail,
    ]),
    [
      ['admin token', 'schedule delete', 'nightly'],
      ['admin token', 'schedule update', 'nightly: cron, enabled'],
      ['admin token', 'schedule update', 'nightly: enabled'],
      ['admin token', 'schedule create', 'nightly: 0 3 * * * (Europe/Berlin)'],
    ],
  );
});

test('a due schedule fires one job for the branch head, with its inputs, and the schedule records it', async () => {
  const id = await newProject();
  await schedule(
    id,
    { name: 'nightly', cron: '0 3 * * *', ref: 'main', inputs: { env: 'prod' } },
    at('2026-01-01T00:00:00Z'),
  );
  const early = await fireDueSchedules(ctx, at('2026-01-01T02:59:59Z'));
  assert.equal(early.schedules_fired, 0, 'not due before its tick');
  // The jitter: not before the tick plus its offset.
  const jitter = jitterSeconds(id, 'nightly');
  if (jitter > 0) {
    await fireDueSchedules(ctx, new Date(at('2026-01-01T03:00:00Z').getTime() + jitter * 1000 - 1));
    assert.equal((await jobsOf(id)).length, 0, 'not before the jitter has passed');
  }
  const fired = await fireDueSchedules(ctx, past('2026-01-01T03:00:00Z'));
  assert.equal(fired.schedules_fired, 1);
  const [job] = await jobsOf(id);
  assert.equal(job!.trigger, 'schedule');
  assert.equal(job!.ref, 'refs/heads/main');
  assert.equal(job!.sha, mainSha);
  assert.equal(job!.schedule_name, 'nightly');
  const view = await waitForJob(stack, job!.id);
  assert.equal(view.job.state, 'running', JSON.stringify(view.job));
  const tasks = Object.fromEntries(view.tasks.map((t: { name: string }) => [t.name, t])) as Record<
    string,
    { name: string }
  >;
  assert.deepEqual(Object.keys(tasks).sort(), ['build', 'nightly'], 'when: schedule nightly');
  const { rows } = await pool.query<{ env: Record<string, string>; script: string[] }>(
    `select env, script from tasks where job_id = $1 and name = 'build'`,
    [job!.id],
  );
  assert.equal(rows[0]!.env.CONDUCTOR_INPUT_ENV, 'prod');
  assert.deepEqual(rows[0]!.script, ['echo prod']);

  // The job page says what started it.
  const login = await fetch(`${stack.url}/login`, {
    method: 'POST',
    body: new URLSearchParams({ token: stack.adminToken, next: '/' }),
    redirect: 'manual',
  });
  const cookie = login.headers.getSetCookie()[0]!.split(';')[0]!;
  const jobPage = await (
    await fetch(`${stack.url}/jobs/${job!.id}`, { headers: { cookie } })
  ).text();
  assert.match(jobPage, /<dt>Trigger<\/dt><dd>schedule nightly on main<\/dd>/);

  const s = await stored(id, 'nightly');
  assert.equal(s.last_job_id, job!.id);
  assert.equal(s.last_error, null);
  assert.equal(s.next_run_at.toISOString(), '2026-01-02T03:00:00.000Z');
  assert.deepEqual(await ticks(id), ['2026-01-01T03:00:00.000Z']);
  // The same moment again fires nothing.
  assert.equal((await fireDueSchedules(ctx, past('2026-01-01T03:00:00Z'))).schedules_fired, 0);
  assert.equal((await jobsOf(id)).length, 1);
});

/** A connection of its own holding the project's row, until released. */
async function holdProject(projectId: string): Promise<() => Promise<void>> {
  const client = new pg.Client({ connectionString: ctx.config.DATABASE_URL });
  await client.connect();
  await client.query('begin');
  await client.query('select 1 from projects where id = $1 for update', [projectId]);
  return async () => {
    await client.query('rollback');
    await client.end();
  };
}

for (const first of ['one', 'two'] as const) {
  test(`two tickers racing for one tick make one job (ticker ${first} queued first)`, async () => {
    const id = await newProject();
    await schedule(
      id,
      { name: 'hourly', cron: '@hourly', ref: 'main' },
      at('2026-02-01T00:10:00Z'),
    );
    const racing = { url: ctx.config.DATABASE_URL!, applicationName: `sched-race-${first}` };
    const racers = await racePool(racing, 4);
    try {
      const ticker: AppContext = { ...ctx, pool: racers };
      const now = past('2026-02-01T01:00:00Z');
      const release = await holdProject(id);
      // The first takes the tick's row, then waits for the held project row
      // (job creation); the second then waits on the first's tick row.
      const firstRun = fireDueSchedules(ticker, now);
      await untilWaiting(pool, racing, 1);
      const secondRun = fireDueSchedules(ticker, now);
      await untilWaiting(pool, racing, 2);
      await release();
      const [a, b] = await Promise.all([firstRun, secondRun]);
      assert.equal(a.schedules_fired, 1, 'the ticker that queued first fired');
      assert.equal(b.schedules_fired, 0, 'the other found the tick fired');
    } finally {
      await racers.end();
    }
    const jobs = await jobsOf(id);
    assert.equal(jobs.length, 1, 'one job for the tick');
    assert.deepEqual(await ticks(id), ['2026-02-01T01:00:00.000Z']);
    assert.equal((await stored(id, 'hourly')).last_job_id, jobs[0]!.id);
  });
}

test('two tickers let go at once make one job', async () => {
  const id = await newProject();
  await schedule(id, { name: 'hourly', cron: '@hourly', ref: 'main' }, at('2026-02-02T00:10:00Z'));
  const racing = { url: ctx.config.DATABASE_URL!, applicationName: 'sched-race-both' };
  const racers = await racePool(racing, 4);
  try {
    const ticker: AppContext = { ...ctx, pool: racers };
    const now = past('2026-02-02T01:00:00Z');
    const results = await Promise.all([
      fireDueSchedules(ticker, now),
      fireDueSchedules(ticker, now),
    ]);
    assert.equal(
      results.reduce((n, r) => n + r.schedules_fired, 0),
      1,
    );
  } finally {
    await racers.end();
  }
  assert.equal((await jobsOf(id)).length, 1);
});

test('DST: a time skipped by spring-forward fires at the next valid time, once', async () => {
  const id = await newProject();
  const created = await schedule(
    id,
    { name: 'early', cron: '30 2 * * *', timezone: 'America/New_York', ref: 'main' },
    at('2026-03-07T12:00:00Z'),
  );
  // 02:30 does not exist on 8 March 2026 in New York; 03:00 EDT does.
  assert.equal(created.next_run_at?.toISOString(), '2026-03-08T07:00:00.000Z');
  assert.equal((await fireDueSchedules(ctx, past('2026-03-08T07:00:00Z'))).schedules_fired, 1);
  assert.equal((await stored(id, 'early')).next_run_at.toISOString(), '2026-03-09T06:30:00.000Z');
  assert.equal((await fireDueSchedules(ctx, past('2026-03-08T08:00:00Z'))).schedules_fired, 0);
  assert.deepEqual(await ticks(id), ['2026-03-08T07:00:00.000Z']);
});

test('DST: a repeated hour fires once', async () => {
  const id = await newProject();
  const created = await schedule(
    id,
    { name: 'late', cron: '30 1 * * *', timezone: 'America/New_York', ref: 'main' },
    at('2026-10-31T12:00:00Z'),
  );
  assert.equal(created.next_run_at?.toISOString(), '2026-11-01T05:30:00.000Z', '01:30 EDT');
  assert.equal((await fireDueSchedules(ctx, past('2026-11-01T05:30:00Z'))).schedules_fired, 1);
  // 01:30 EST, an hour later, is the same wall time: nothing fires.
  assert.equal((await fireDueSchedules(ctx, past('2026-11-01T06:30:00Z'))).schedules_fired, 0);
  assert.equal((await stored(id, 'late')).next_run_at.toISOString(), '2026-11-02T06:30:00.000Z');
  assert.equal((await jobsOf(id)).length, 1);
});

test('missed ticks after downtime fire once (catch_up: latest), or not at all (none)', async () => {
  const latest = await newProject();
  const none = await newProject();
  await schedule(latest, { name: 'h', cron: '@hourly', ref: 'main' }, at('2026-04-01T00:10:00Z'));
  await schedule(
    none,
    { name: 'h', cron: '@hourly', ref: 'main', catch_up: 'none' },
    at('2026-04-01T00:10:00Z'),
  );
  // Nothing ticked from 00:10 to 05:40: five ticks missed.
  await fireDueSchedules(ctx, at('2026-04-01T05:40:00Z'));
  assert.equal((await jobsOf(latest)).length, 1, 'one job, not five');
  assert.deepEqual(await ticks(latest), ['2026-04-01T05:00:00.000Z'], 'for the latest tick');
  assert.equal((await stored(latest, 'h')).next_run_at.toISOString(), '2026-04-01T06:00:00.000Z');
  assert.equal((await jobsOf(none)).length, 0, 'catch_up: none fires nothing late');
  assert.equal((await stored(none, 'h')).next_run_at.toISOString(), '2026-04-01T06:00:00.000Z');
  // On time again, both fire.
  await fireDueSchedules(ctx, past('2026-04-01T06:00:00Z'));
  assert.equal((await jobsOf(latest)).length, 2);
  assert.equal((await jobsOf(none)).length, 1);
});

test('a deleted branch records last_error and a failed job that says why', async () => {
  const id = await newProject();
  await schedule(id, { name: 'gone', cron: '@daily', ref: 'gone' }, at('2026-05-01T10:00:00Z'));
  assert.equal((await fireDueSchedules(ctx, past('2026-05-02T00:00:00Z'))).schedules_fired, 1);
  const [job] = await jobsOf(id);
  assert.equal(job!.state, 'failed');
  assert.equal(job!.trigger, 'schedule');
  assert.match(job!.error ?? '', /^schedule gone: branch gone does not exist in /);
  const s = await stored(id, 'gone');
  assert.equal(s.last_job_id, job!.id);
  assert.match(s.last_error, /branch gone does not exist/);
  // The API shows it.
  const list = await stack.call('GET', `/v1/projects/${id}/schedules`, {
    token: stack.adminToken,
  });
  assert.match(list.body.schedules[0].last_error, /branch gone does not exist/);
  const view = await getJob(stack, job!.id);
  assert.equal(view.job.state, 'failed');
});

test('a broken pipeline file records last_error and a failed job naming the problem', async () => {
  const id = await newProject();
  await schedule(id, { name: 'b', cron: '@daily', ref: 'broken' }, at('2026-05-01T10:00:00Z'));
  await fireDueSchedules(ctx, past('2026-05-02T00:00:00Z'));
  const [job] = await jobsOf(id);
  const view = await waitForJob(stack, job!.id, (v) => v.job.state === 'failed');
  assert.match(view.job.error, /tasks\.build: unknown key "scrip"/);
  // The schedule's last_error follows once the compile has failed the job.
  for (let i = 0; i < 200 && (await stored(id, 'b')).last_error === null; i++) await sleep(10);
  assert.match(
    (await stored(id, 'b')).last_error,
    /^job #1 failed: \.conductor\.yml:3:\d+: tasks\.build: /,
  );
});

test('a disabled project fires nothing, and its schedules move on', async () => {
  const id = await newProject();
  await schedule(id, { name: 'h', cron: '@hourly', ref: 'main' }, at('2026-06-01T00:10:00Z'));
  const off = await stack.call('PATCH', `/v1/projects/${id}`, {
    token: stack.adminToken,
    body: { enabled: false },
  });
  assert.equal(off.status, 200, off.text);
  const fired = await fireDueSchedules(ctx, past('2026-06-01T03:00:00Z'));
  assert.equal(fired.schedules_fired, 0);
  assert.equal((await jobsOf(id)).length, 0);
  assert.deepEqual(await ticks(id), []);
  assert.equal((await stored(id, 'h')).next_run_at.toISOString(), '2026-06-01T04:00:00.000Z');
});

test('a schedule given an input the pipeline lacks makes a job that fails naming it', async () => {
  const id = await newProject();
  await schedule(
    id,
    { name: 'nightly', cron: '@daily', ref: 'main', inputs: { env: 'qa', region: 'eu' } },
    at('2026-07-01T10:00:00Z'),
  );
  await fireDueSchedules(ctx, past('2026-07-02T00:00:00Z'));
  const [job] = await jobsOf(id);
  const view = await waitForJob(stack, job!.id, (v) => v.job.state === 'failed');
  assert.match(view.job.error, /input "region" was given \("eu"\) but is not declared/);
  assert.match(view.job.error, /input "env": expected one of "staging", "prod", got "qa"/);
});

test('for the idle gate, a due schedule is work and the next one is the wake time', async () => {
  const { scheduleWork } = await import('../../lib/schedules/store.ts');
  assert.deepEqual(await scheduleWork(pool), { work: false, wakeAt: null });
  const id = await newProject();
  // Made an hour ago by the test's clock: its first tick has passed.
  const made = await schedule(
    id,
    { name: 'h', cron: '@hourly', ref: 'main' },
    new Date(Date.now() - 3_600_000),
  );
  const due = await scheduleWork(pool);
  assert.equal(due.work, true);
  await fireDueSchedules(ctx);
  const after = await scheduleWork(pool);
  assert.equal(after.work, false);
  const s = await stored(id, 'h');
  assert.equal(after.wakeAt?.toISOString(), s.due_at.toISOString());
  assert.ok(s.next_run_at > made.next_run_at!);
  // A disabled project's schedules neither keep the gate open nor wake it.
  await stack.call('PATCH', `/v1/projects/${id}`, {
    token: stack.adminToken,
    body: { enabled: false },
  });
  assert.deepEqual(await scheduleWork(pool), { work: false, wakeAt: null });
});
