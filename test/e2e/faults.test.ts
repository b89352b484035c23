// Connections die: a failover, a proxy restart, an idle-session timeout end a
// backend with a FATAL message that can arrive while a client is checked out
// between two queries. This test ends random backends of the stack's
// database while runners claim, heartbeat, log and complete through the local
// HTTP server, and checks that the server stays up, that every answer is one
// a runner knows how to handle, and that nothing is lost or done twice.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { runSweep } from '../../lib/app/sweep.ts';
import { createPool } from '../../lib/db/index.ts';
import { githubPush } from '../forge/fixtures/github.ts';
import { holdRows, until } from '../helpers/race.ts';
import {
  claim,
  claimTask,
  complete,
  createWorker,
  deliverRunning,
  heartbeat,
  pushRunning,
  startE2E,
  uploadLog,
} from './calls.ts';
import { pipeline, sha } from './payloads.ts';

const REPO = 'acme/faults';
const LABEL = 'faults';
const {
  fake,
  stack,
  projects: { project },
} = await startE2E(import.meta.filename, {
  env: { CONDUCTOR_LEASE_S: '2' },
  projects: { project: { forge: 'github', id: 'faults', repo: REPO, cancel_superseded: false } },
});

const TASKS = `  a:
    script: [make a]
    outputs: [v]
  b:
    needs: [a]
    script: [make b]
  c:
    needs: [a]
    script: [make c]
  d:
    needs: [b, c]
    script: [make d]
  e:
    script: [make e]
`;
const JOBS = 24;
const STORM_MS = 8_000;
const KNOWN = new Set([200, 204, 409, 503]);

test('backends terminated at random while runners work: the server stays up, answers 2xx/204/409/503, and every job ends once', async (t) => {
  const admin = new pg.Client({ connectionString: stack.context.config.DATABASE_URL });
  await admin.connect();
  try {
    // Every job state change, to count settles.
    await admin.query(`
      create table job_transitions (job_id uuid, old text, new text);
      create function record_job_transition() returns trigger language plpgsql as $$
      begin
        insert into job_transitions values (new.id, old.state, new.state);
        return new;
      end $$;
      create trigger job_transitions after update of state on jobs
        for each row when (old.state is distinct from new.state)
        execute function record_job_transition();`);

    const jobIds: string[] = [];
    for (let i = 0; i < JOBS; i++) {
      const commit = sha(`faults-${i}`);
      fake.setFile(REPO, commit, pipeline(LABEL, TASKS));
      const { hook } = await deliverRunning(
        stack,
        'github',
        'push',
        githubPush(REPO, commit, { ref: `refs/heads/f${i}` }),
        project.secret,
      );
      jobIds.push(hook.body.job_id);
    }
    const { token } = await createWorker(stack, [LABEL]);

    const answers = new Map<number, number>();
    const unexpected: string[] = [];
    const note = (what: string, status: number, text: string) => {
      answers.set(status, (answers.get(status) ?? 0) + 1);
      if (!KNOWN.has(status)) unexpected.push(`${what} ${status} ${text}`);
    };
    // Sends a runner call again while it answers 503, as a runner does.
    const send = async (what: string, call: () => ReturnType<typeof claim>) => {
      for (;;) {
        const res = await call();
        note(what, res.status, res.text);
        if (res.status !== 503) return res;
        await sleep(10);
      }
    };

    let running = true;
    const runner = async () => {
      while (running) {
        const got = await send('claim', () => claim(stack, token));
        if (got.status !== 200) {
          await sleep(15);
          continue;
        }
        const task = got.body.task;
        // A little work between the calls, so the storm meets tasks in
        // every step.
        await sleep(20);
        const beat = await send('heartbeat', () => heartbeat(stack, token, task.id, task.lease_id));
        if (beat.status === 409) continue;
        const logged = await send('logs', () =>
          uploadLog(stack, token, task.id, { lease_id: task.lease_id, offset: 0, data: 'ok\n' }),
        );
        if (logged.status === 409) continue;
        await send('complete', () =>
          complete(stack, token, task.id, {
            lease_id: task.lease_id,
            outcome: 'success',
            exit_code: 0,
            ...(task.name === 'a' ? { outputs: { v: '1' } } : {}),
          }),
        );
      }
    };

    let terminated = 0;
    const killer = async () => {
      const until = Date.now() + STORM_MS;
      while (Date.now() < until) {
        const { rows } = await admin.query<{ pid: number }>(
          `select pid from pg_stat_activity
            where datname = current_database() and pid <> pg_backend_pid()
              and application_name = 'conductor'
            order by random() limit 1`,
        );
        if (rows[0]) {
          await admin.query('select pg_terminate_backend($1)', [rows[0].pid]);
          terminated++;
        }
        await sleep(40 + Math.random() * 80);
      }
    };

    const runners = Array.from({ length: 4 }, runner);
    await killer();
    // After the storm the runners go on, and the sweep takes back the
    // leases of claims whose answer was lost to a terminated connection.
    const deadline = Date.now() + 20_000;
    let open = JOBS;
    while (Date.now() < deadline) {
      await runSweep(stack.context);
      const { rows } = await admin.query<{ n: number }>(
        `select count(*)::int as n from jobs where id = any($1::uuid[]) and state in ('pending', 'running')`,
        [jobIds],
      );
      open = rows[0]!.n;
      if (open === 0) break;
      await sleep(250);
    }
    running = false;
    await Promise.all(runners);

    // How many requests lost their connection mid-flight is the storm's luck
    // (a terminated idle connection costs no request anything): the 503 of
    // a request whose backend is terminated is forced in the next test.
    assert.ok(terminated > 20, `backends were terminated (${terminated})`);
    assert.deepEqual(unexpected, [], 'every answer is 200, 204, 409 or 503');
    assert.equal(open, 0, 'every job reached a final state');

    const settles = await admin.query<{ job_id: string; n: number }>(
      `select job_id, count(*)::int as n from job_transitions
        where old = 'running' group by job_id`,
    );
    assert.equal(settles.rows.length, JOBS);
    for (const row of settles.rows) assert.equal(row.n, 1, `job ${row.job_id} settled once`);

    const attempts = await admin.query<{
      name: string;
      attempt: number;
      max_attempts: number;
      n: number;
    }>(
      `select t.name, t.attempt, t.max_attempts,
              (select count(*)::int from task_attempts a where a.task_id = t.id) as n
         from tasks t where t.job_id = any($1::uuid[])`,
      [jobIds],
    );
    for (const t of attempts.rows) {
      assert.ok(
        t.attempt <= t.max_attempts,
        `${t.name}: attempt ${t.attempt} of ${t.max_attempts}`,
      );
      assert.equal(t.n, t.attempt, `${t.name}: one attempt row per counted attempt`);
    }
    const states = await admin.query<{ state: string; n: number }>(
      `select state, count(*)::int as n from jobs where id = any($1::uuid[]) group by state`,
      [jobIds],
    );
    t.diagnostic(
      `terminated ${terminated} backends; answers ${JSON.stringify(Object.fromEntries(answers))}; jobs ${JSON.stringify(states.rows)}`,
    );
    // The server still answers on fresh connections.
    const health = await stack.call('GET', '/v1/health');
    assert.equal(health.status, 200, health.text);
  } finally {
    await admin.end();
  }
});

test('a request whose backend is terminated while it waits answers 503 with Retry-After, and the next request is served', async () => {
  const label = 'faults-forced';
  await pushRunning(
    { fake, stack },
    { repo: REPO, secret: project.secret },
    label,
    `  only:\n    script: [make it]\n`,
  );
  const { token } = await createWorker(stack, [label]);
  const task = await claimTask(stack, token);
  // The test's connections are named apart from the product's, so the look
  // at pg_stat_activity finds the stack's waiting statement only.
  const admin = createPool({
    url: stack.context.config.DATABASE_URL!,
    max: 2,
    applicationName: 'faults-admin',
  });
  try {
    const release = await holdRows(admin, 'tasks', [task.id]);
    let beat: Awaited<ReturnType<typeof heartbeat>>;
    try {
      const pending = heartbeat(stack, token, task.id, task.lease_id);
      let pid: number | undefined;
      await until('the heartbeat waits for the held row', async () => {
        const { rows } = await admin.query<{ pid: number }>(
          `select pid from pg_stat_activity
            where datname = current_database() and application_name = 'conductor'
              and wait_event_type = 'Lock'`,
        );
        pid = rows[0]?.pid;
        return pid !== undefined;
      });
      await admin.query('select pg_terminate_backend($1)', [pid]);
      beat = await pending;
    } finally {
      await release();
    }
    assert.equal(beat.status, 503, beat.text);
    assert.equal(beat.body.error.code, 'unavailable');
    assert.match(String(beat.headers.get('retry-after')), /^[1-9][0-9]*$/);
    const done = await complete(stack, token, task.id, {
      lease_id: task.lease_id,
      outcome: 'success',
      exit_code: 0,
    });
    assert.equal(done.status, 200, done.text);
  } finally {
    await admin.end();
  }
});
