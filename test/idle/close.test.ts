// The gate's close survives a crash at every step (#32): a sweep that dies
// anywhere in its close leaves the gate open or a `closing` marker, and the
// next minute's sweep finishes the close, reopening the gate when work came
// in meanwhile. And the gate counts only work that can proceed: a status
// whose retry is in the future and a task no live worker may claim leave a
// wake time, not an open gate.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { describe, test } from 'node:test';
import { scheduledSweep } from '../../lib/app/sweep.ts';
import { loadConfig } from '../../lib/config.ts';
import type { AppContext } from '../../lib/context.ts';
import {
  CLOSING_KEY,
  type GateStore,
  IdleGate,
  MemoryGateStore,
  OPEN_KEY,
  WAKE_KEY,
} from '../../lib/idle/gate.ts';
import { lookForWork } from '../../lib/idle/work.ts';
import { createJob } from '../../lib/scheduler/index.ts';
import { generateKey, parseKeyring } from '../../lib/secrets.ts';
import { testDatabase } from '../helpers/db.ts';
import { makeProject, makeWorker, sha, spec, startedJob } from '../helpers/fixtures.ts';

const db = await testDatabase(import.meta.filename);
const projectId = await makeProject(db.pool);

function contextWith(gate: IdleGate): AppContext {
  return {
    config: loadConfig({ DATABASE_URL: db.url }),
    pool: db.pool,
    keyring: parseKeyring(generateKey()),
    adminToken: 'a'.repeat(32),
    gate,
    dispatchCompile: async () => {},
  };
}

async function finishEverything(): Promise<void> {
  await db.pool.query(
    `update jobs set state = 'cancelled', finished_at = now() where state in ('pending', 'running', 'blocked')`,
  );
  await db.pool.query(
    `update status_outbox set result = 'superseded', done_at = now() where result is null`,
  );
  await db.pool.query('update workers set revoked = true');
}

async function commitJob(): Promise<void> {
  await createJob(db.pool, {
    projectId,
    ref: `refs/heads/c-${randomBytes(3).toString('hex')}`,
    sha: sha(),
    trigger: 'push',
    trusted: true,
  });
}

class Crash extends Error {}

/**
 * The close's steps as seen from outside: each call to the bucket and each
 * look. At step `crashAt` the process dies: that step and every later one
 * fail, as they would in a Lambda that was killed.
 */
function dyingAt(store: GateStore, crashAt: number, steps: string[]) {
  let dead = false;
  const step = (name: string) => {
    steps.push(name);
    if (dead || steps.length === crashAt) {
      dead = true;
      throw new Crash(`died at ${name}`);
    }
  };
  const wrapped: GateStore = {
    exists: async (k) => {
      step(`exists ${k}`);
      return store.exists(k);
    },
    read: async (k) => {
      step(`read ${k}`);
      return store.read(k);
    },
    write: async (k, b) => {
      step(`write ${k}`);
      await store.write(k, b);
    },
    remove: async (k) => {
      step(`remove ${k}`);
      await store.remove(k);
    },
  };
  return { wrapped, step };
}

// The steps of a close with no work and with work found by the second look.
const QUIET = ['look', 'write gate/closing', 'remove gate/open', 'look', 'remove gate/wake-at'];
const BUSY = ['look', 'write gate/closing', 'remove gate/open', 'look', 'write gate/open'];

describe('a sweep that dies in its close', () => {
  for (const [what, withWork, steps] of [
    ['nothing open', false, QUIET],
    ['a job committed before the close deleted the marker', true, BUSY],
  ] as const) {
    // With work, the job is committed after the first look: dying there is the quiet case.
    for (let crashAt = withWork ? 2 : 1; crashAt <= steps.length + 1; crashAt++) {
      const where = steps[crashAt - 1] ?? 'removing gate/closing';
      test(`${what}, died at step ${crashAt} (${where}): the next sweep ends it right`, async () => {
        await finishEverything();
        const store = new MemoryGateStore();
        const seen: string[] = [];
        const { wrapped, step } = dyingAt(store, crashAt, seen);
        const dying = new IdleGate(wrapped, { cacheMs: 0 });
        await assert.rejects(
          dying.closeIfIdle(
            async () => {
              step('look');
              const look = await lookForWork(db.pool);
              // A writer commits (and would open, but its open lands before
              // the delete, so the delete takes it away) after the first look.
              if (withWork && seen.length === 1) await commitJob();
              return look;
            },
            { markerSeen: true },
          ),
          Crash,
        );
        // The next minute: a new container, the same bucket.
        const next = new IdleGate(store, { cacheMs: 0 });
        const call = await next.sweepCall();
        if (store.objects.has(OPEN_KEY)) assert.equal(call, 'open');
        else assert.equal(call, 'closing', 'a close that left the gate shut left its marker');
        const swept = (await scheduledSweep(contextWith(next), { daily: false })) as {
          gate: string;
        };
        assert.equal(swept.gate, withWork ? 'open' : 'closed');
        assert.equal(store.marker, withWork, withWork ? 'open over the job' : 'closed');
        assert.equal(store.objects.has(CLOSING_KEY), false, 'no close left pending');
        if (!withWork) {
          assert.deepEqual(await scheduledSweep(contextWith(next), { daily: false }), {
            gate: 'closed',
          });
        }
      });
    }
  }

  test('a step that hangs fails after its bound, and a second look that hangs reopens the gate', async () => {
    await finishEverything();
    const store = new MemoryGateStore();
    const gate = new IdleGate(store, { cacheMs: 0, stepMs: 50 });
    let looks = 0;
    const started = Date.now();
    await assert.rejects(
      gate.closeIfIdle(
        async () => (looks++ === 0 ? { work: false } : new Promise<never>(() => {})),
        { markerSeen: true },
      ),
      /no answer within 100 ms/,
    );
    assert.ok(Date.now() - started < 2_000);
    assert.equal(store.marker, true, 'not knowing is not "no work"');
  });
});

describe('only work that can proceed keeps the gate open', () => {
  test('a status whose next retry is in the future closes the gate with a wake time; the sweep opens it then', async () => {
    await finishEverything();
    const { job } = await createJob(db.pool, {
      projectId,
      ref: 'refs/heads/retry',
      sha: sha(),
      trigger: 'push',
      trusted: true,
    });
    await db.pool.query(`update jobs set state = 'cancelled', finished_at = now() where id = $1`, [
      job.id,
    ]);
    const retryAt = new Date(Date.now() + 3_600_000);
    await db.pool.query(
      `insert into status_outbox (job_id, state, description, next_attempt_at)
       values ($1, 'failure', 'retry later', $2)`,
      [job.id, retryAt],
    );
    const store = new MemoryGateStore();
    const gate = new IdleGate(store, { cacheMs: 0 });
    assert.equal(
      await gate.closeIfIdle(() => lookForWork(db.pool), { markerSeen: true }),
      'closed',
    );
    assert.equal(Date.parse(store.objects.get(WAKE_KEY)!), retryAt.getTime());
    assert.equal(await gate.sweepCall(Date.now()), 'closed', 'not yet due: no connection');
    assert.equal(await gate.sweepCall(retryAt.getTime()), 'due', 'due: the sweep connects');
  });

  test('a queued task no live worker may claim does not hold the gate open; a worker that may does', async () => {
    await finishEverything();
    await startedJob(db.pool, projectId, [spec('gpu-only', { labels: ['gpu'] })]);
    await makeWorker(db.pool, ['linux']);
    const look = await lookForWork(db.pool);
    assert.equal(look.work, false, 'nobody can claim it');
    assert.ok(look.wakeAt, 'its queue timeout is the wake time');
    await makeWorker(db.pool, ['gpu', 'linux']);
    assert.equal((await lookForWork(db.pool)).work, true);
    await db.pool.query(`update workers set revoked = true where 'gpu' = any (labels)`);
    assert.equal((await lookForWork(db.pool)).work, false, 'a revoked worker claims nothing');
  });

  test('a status due now and a pending job are work', async () => {
    await finishEverything();
    await commitJob();
    assert.equal((await lookForWork(db.pool)).work, true);
  });
});
