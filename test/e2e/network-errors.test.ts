// A lock timeout (55P03) and a cancelled statement (57014) on the runner's
// routes, each forced on the real local HTTP server: they used to reach the
// runner as `500 internal` and count as sweep errors (#35). They answer
// `503 unavailable` with Retry-After, and the sweep leaves such a row for
// its next pass, logged as a warning.
import assert from 'node:assert/strict';
import { after, mock, test } from 'node:test';
import { runSweep } from '../../lib/app/sweep.ts';
import { createPool } from '../../lib/db/index.ts';
import { setQuiet } from '../../lib/log.ts';
import { holdRows, until } from '../helpers/race.ts';
import {
  claimTask,
  complete,
  createWorker,
  heartbeat,
  pushRunning,
  type Reply,
  startE2E,
} from './calls.ts';

const e2e = await startE2E(import.meta.filename, {
  env: { CONDUCTOR_LEASE_S: '300' },
  projects: {
    project: {
      forge: 'github',
      id: 'net-errors',
      repo: 'acme/net-errors',
      cancel_superseded: false,
    },
  },
});
const { stack } = e2e;
const project = { repo: 'acme/net-errors', secret: e2e.projects.project.secret };

// The test's own connections, named apart from the product's ('conductor'),
// so a look at pg_stat_activity finds the stack's statement and not these.
const ADMIN = 'network-errors-admin';
const admin = createPool({
  url: stack.context.config.DATABASE_URL!,
  max: 3,
  applicationName: ADMIN,
});
after(() => admin.end());

/** A running task of its own (a job of one task labelled `label`), claimed by a worker of that label. */
async function claimedTask(label: string) {
  await pushRunning(e2e, project, label, '  only:\n    script: [make it]\n');
  const { token } = await createWorker(stack, [label]);
  const task = await claimTask(stack, token);
  return { token, task };
}

/** The pid of the stack's backend that waits for a lock, once there is one. */
async function waitingBackend(): Promise<number> {
  let pid: number | undefined;
  await until('a statement of the stack waits for the held row', async () => {
    const { rows } = await admin.query<{ pid: number }>(
      `select pid from pg_stat_activity
        where datname = current_database() and application_name = 'conductor'
          and wait_event_type = 'Lock'`,
    );
    pid = rows[0]?.pid;
    return pid !== undefined;
  });
  return pid!;
}

function assertUnavailable(res: Reply) {
  assert.equal(res.status, 503, res.text);
  assert.equal(res.body.error.code, 'unavailable');
  const retryAfter = res.headers.get('retry-after');
  assert.match(String(retryAfter), /^[1-9][0-9]*$/, 'Retry-After in whole seconds');
}

test('a completion that meets a row lock held past its lock_timeout answers 503 unavailable with Retry-After, and succeeds when sent again', async () => {
  const { token, task } = await claimedTask('lock-timeout');
  const release = await holdRows(admin, 'tasks', [task.id]);
  let res: Reply;
  try {
    // conductor_complete_success waits at most its lock_timeout (5 s), below
    // the session's statement_timeout (8 s): the answer is the 55P03.
    res = await complete(stack, token, task.id, { lease_id: task.lease_id, outcome: 'success' });
  } finally {
    await release();
  }
  assertUnavailable(res);
  assert.match(res.body.error.message, /locked/);
  const again = await complete(stack, token, task.id, {
    lease_id: task.lease_id,
    outcome: 'success',
  });
  assert.equal(again.status, 200, again.text);
  assert.equal(again.body.state, 'success');
});

test('a heartbeat whose statement is cancelled while it waits (57014) answers 503 unavailable with Retry-After', async () => {
  const { token, task } = await claimedTask('cancelled');
  const release = await holdRows(admin, 'tasks', [task.id]);
  let res: Reply;
  try {
    const pending = heartbeat(stack, token, task.id, task.lease_id);
    const pid = await waitingBackend();
    await admin.query('select pg_cancel_backend($1)', [pid]);
    res = await pending;
  } finally {
    await release();
  }
  assertUnavailable(res);
  const again = await heartbeat(stack, token, task.id, task.lease_id);
  assert.equal(again.status, 200, again.text);
});

test('a sweep repair that meets a held row lock counts it as deferred and logs a warning, not an error; the next sweep repairs it', async () => {
  const { task } = await claimedTask('sweep-deferred');
  await admin.query(
    `update tasks set lease_expires_at = now() - interval '1 minute' where id = $1`,
    [task.id],
  );
  const lines: Array<{ level: string; message: string }> = [];
  const write = mock.method(process.stderr, 'write', (chunk: unknown) => {
    for (const line of String(chunk).split('\n')) {
      if (line.startsWith('{')) lines.push(JSON.parse(line));
    }
    return true;
  });
  setQuiet(false);
  const release = await holdRows(admin, 'tasks', [task.id]);
  let summary: Awaited<ReturnType<typeof runSweep>>;
  try {
    summary = await runSweep(stack.context, { lockTimeoutMs: 200 });
  } finally {
    await release();
    setQuiet(process.env.CONDUCTOR_TEST_LOGS !== '1');
    write.mock.restore();
  }
  assert.equal(summary.deferred, 1, JSON.stringify(summary));
  assert.equal(summary.errors, 0, JSON.stringify(summary));
  assert.equal(summary.leases_expired, 0);
  const deferred = lines.find((l) => /expiring a lease deferred/.test(l.message));
  assert.equal(deferred?.level, 'warn', JSON.stringify(lines));
  assert.deepEqual(
    lines.filter((l) => l.level === 'error'),
    [],
    'nothing was logged as an error',
  );

  const next = await runSweep(stack.context);
  assert.equal(next.leases_expired, 1, JSON.stringify(next));
  assert.equal(next.deferred, 0);
});
