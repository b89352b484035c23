// The idle gate loses no work: every ordering of a writer (commit a job, then
// open the gate) against the sweep's close (look, close, look again, reopen)
// ends with the gate open over the job; a claim and the minute's sweep behind
// a closed gate answer without the database.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, describe, test } from 'node:test';
import type { Context } from 'aws-lambda';
import { handler as sweepHandler } from '../../functions/sweep.ts';
import { dispatchCompile } from '../../lib/app/dispatch.ts';
import { loadConfig } from '../../lib/config.ts';
import { type AppContext, clearContext, setContext } from '../../lib/context.ts';
import { createPool } from '../../lib/db/index.ts';
import { IdleGate, MemoryGateStore, OPEN_KEY } from '../../lib/idle/gate.ts';
import { lookForWork } from '../../lib/idle/work.ts';
import { createJob } from '../../lib/scheduler/index.ts';
import { generateKey, parseKeyring } from '../../lib/secrets.ts';
import { testDatabase } from '../helpers/db.ts';
import { makeProject, sha } from '../helpers/fixtures.ts';

const db = await testDatabase(import.meta.filename);
const projectId = await makeProject(db.pool);

function contextWith(gate: IdleGate, pool = db.pool): AppContext {
  return {
    config: loadConfig({ DATABASE_URL: db.url }),
    pool,
    keyring: parseKeyring(generateKey()),
    adminToken: 'a'.repeat(32),
    gate,
    dispatchCompile: async () => {},
  };
}

/** Writes what a webhook writes: a pending job, committed. */
async function commitJob(): Promise<string> {
  const { job } = await createJob(db.pool, {
    projectId,
    ref: `refs/heads/b-${randomBytes(3).toString('hex')}`,
    sha: sha(),
    trigger: 'push',
    trusted: true,
  });
  return job.id;
}

async function finishEverything(): Promise<void> {
  await db.pool.query(
    `update jobs set state = 'cancelled', finished_at = now() where state in ('pending', 'running', 'blocked')`,
  );
  await db.pool.query(
    `update status_outbox set result = 'superseded', done_at = now() where result is null`,
  );
}

// The sweep's close has four points where another process can act: before
// its first look, between the look and the close, between the close and the
// second look, and after the second look.
const GAPS = ['before the first look', 'before the close', 'before the second look', 'after it'];

describe('every ordering of a writer against the sweep closing the gate', () => {
  for (let commitAt = 0; commitAt < GAPS.length; commitAt++) {
    for (let openAt = commitAt; openAt < GAPS.length; openAt++) {
      test(`job committed ${GAPS[commitAt]}, gate opened ${GAPS[openAt]}: the gate ends open`, async () => {
        await finishEverything();
        const store = new MemoryGateStore();
        const gate = new IdleGate(store, { cacheMs: 0 });
        const ctx = contextWith(gate);
        let gap = 0;
        let jobId: string | undefined;
        const writerAt = async () => {
          if (gap === commitAt) jobId = await commitJob();
          // The writer's open is dispatchCompile's, after its commit.
          if (gap === openAt) await dispatchCompile(ctx, jobId!);
          gap++;
        };
        const realRemove = store.remove.bind(store);
        store.remove = async (key) => {
          if (key === OPEN_KEY) await writerAt();
          await realRemove(key);
        };
        const state = await (async () => {
          await writerAt();
          let looks = 0;
          const s = await gate.closeIfIdle(
            async () => {
              if (looks++ === 1) await writerAt();
              return lookForWork(db.pool);
            },
            { markerSeen: true },
          );
          while (gap < GAPS.length) await writerAt();
          return s;
        })();
        assert.ok(jobId, 'the writer ran');
        assert.equal(store.marker, true, `the gate was left closed over job ${jobId}`);
        // The answer may be "closed" when the writer opened after the second
        // look; the marker is what claims read, and it is there.
        assert.ok(['open', 'closed'].includes(state));
      });
    }
  }

  test('with no writer, the sweep closes the gate', async () => {
    await finishEverything();
    const gate = new IdleGate(new MemoryGateStore(), { cacheMs: 0 });
    assert.equal(
      await gate.closeIfIdle(() => lookForWork(db.pool), { markerSeen: true }),
      'closed',
    );
    assert.equal(await gate.store.exists(OPEN_KEY), false);
  });

  test('a second look that fails leaves the gate open', async () => {
    await finishEverything();
    const gate = new IdleGate(new MemoryGateStore(), { cacheMs: 0 });
    let looks = 0;
    await assert.rejects(
      gate.closeIfIdle(
        async () => {
          if (looks++ === 1) throw new Error('connection lost');
          return { work: false };
        },
        { markerSeen: true },
      ),
      /connection lost/,
    );
    assert.equal(await gate.store.exists(OPEN_KEY), true);
  });

  test('a sweep that did not read the marker (the daily one) opens a gate left closed over work', async () => {
    await finishEverything();
    await commitJob();
    const store = new MemoryGateStore();
    store.marker = false;
    const gate = new IdleGate(store, { cacheMs: 0 });
    assert.equal(await gate.closeIfIdle(() => lookForWork(db.pool), { markerSeen: false }), 'open');
    assert.equal(store.marker, true);
  });
});

const lambdaContext = { getRemainingTimeInMillis: () => 50_000 } as unknown as Context;
describe('behind a closed gate', () => {
  after(() => clearContext());

  test("the minute's sweep answers without the database; the daily one sweeps", async () => {
    await finishEverything();
    const gate = new IdleGate(new MemoryGateStore(), { cacheMs: 0 });
    const pool = createPool({ url: db.url, max: 2 });
    setContext(contextWith(gate, pool));
    const first = (await sweepHandler({}, lambdaContext)) as { gate: string };
    assert.equal(first.gate, 'closed', 'nothing open: the sweep closed the gate');
    const daily = (await sweepHandler({ conductor: 'daily' }, lambdaContext)) as {
      gate: string;
      jobs_purged: number;
    };
    assert.equal(daily.gate, 'closed');
    assert.equal(typeof daily.jobs_purged, 'number', 'the daily sweep ran retention');
    await pool.end();
    assert.deepEqual(await sweepHandler({}, lambdaContext), { gate: 'closed' });
  });

  test('a job committed and dispatched opens the gate, and the next claim gets its task', async () => {
    await finishEverything();
    const gate = new IdleGate(new MemoryGateStore(), { cacheMs: 0 });
    const ctx = contextWith(gate);
    setContext(ctx);
    assert.equal(
      await gate.closeIfIdle(() => lookForWork(db.pool), { markerSeen: true }),
      'closed',
    );
    assert.equal(await gate.mayHaveWork(), false);
    const jobId = await commitJob();
    await dispatchCompile(ctx, jobId);
    assert.equal(await gate.mayHaveWork(), true);
    const swept = (await sweepHandler({}, lambdaContext)) as { gate: string };
    assert.equal(swept.gate, 'open', 'a pending job keeps the gate open');
  });
});

test('a claim container reads the marker at most once per cache period', async () => {
  let reads = 0;
  const store = new MemoryGateStore();
  const read = store.exists.bind(store);
  store.exists = async (key) => {
    reads++;
    return read(key);
  };
  const gate = new IdleGate(store, { cacheMs: 30_000 });
  assert.equal(await gate.mayHaveWork(1_000_000), true);
  assert.equal(await gate.mayHaveWork(1_029_999), true);
  assert.equal(reads, 1);
  assert.equal(await gate.mayHaveWork(1_030_000), true);
  assert.equal(reads, 2);
  store.exists = async () => {
    throw new Error('S3 is down');
  };
  assert.equal(await gate.mayHaveWork(1_100_000), true, 'an unreadable marker counts as open');
});
