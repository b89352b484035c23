// Schedules under `npm start` with its defaults (issue #49): the local
// stack's sweep every 10 s once gave fireDueSchedules a deadline 10 s away,
// and fireDueSchedules kept 10 s back of its own, so no schedule ever fired,
// with no log line and no last_error. This runs scripts/start.ts as a person
// does, with no sweep setting, and waits for a schedule every minute.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { jitterSeconds } from '../../lib/schedules/cron.ts';
import { testDatabase } from '../helpers/db.ts';
import { runScript } from '../helpers/server-process.ts';
import { gitRepo, waitFor } from '../runner/support.ts';

const db = await testDatabase(import.meta.filename, { migrate: false });
const dataDir = await mkdtemp(join(tmpdir(), 'conductor-sched-start-'));
after(() => rm(dataDir, { recursive: true, force: true }));

test('a schedule every minute fires under npm start with its default settings within 70 s', async () => {
  const adminToken = 'ca_schedules_under_npm_start';
  const server = runScript('scripts/start.ts', [], {
    DATABASE_URL: db.url,
    PORT: '0',
    CONDUCTOR_DATA_DIR: dataDir,
    CONDUCTOR_ADMIN_TOKEN: adminToken,
  });
  const url = (await server.waitFor(/Conductor is running at (http:\/\/\S+)/))[1]!;
  const api = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${url}${path}`, {
      method,
      headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    // biome-ignore lint/suspicious/noExplicitAny: tests read whatever JSON the route answers
    return { status: res.status, body: (await res.json()) as any };
  };
  const { dir: repo } = await gitRepo({
    '.conductor.yml': 'version: 1\ntasks:\n  build:\n    script: [make]\n',
  });
  const made = await api('POST', '/v1/projects', {
    id: 'ticking',
    name: 'ticking',
    forge: 'github',
    repo: 'acme/ticking',
    repo_url: repo,
  });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  // A schedule's jitter (0 to 29 s after its tick) is a hash of its name: one
  // whose jitter is 0, so the 70 s are the wait for the tick (under 60 s)
  // plus one sweep interval (10 s), as a person reads "every minute".
  const name = ['minutely', ...Array.from({ length: 200 }, (_, i) => `minutely-${i}`)].find(
    (n) => jitterSeconds('ticking', n) === 0,
  )!;
  const createdAt = Date.now();
  const schedule = await api('POST', '/v1/projects/ticking/schedules', {
    name,
    cron: '* * * * *',
    ref: 'main',
  });
  assert.equal(schedule.status, 201, JSON.stringify(schedule.body));
  assert.equal(schedule.body.schedule.jitter_s, 0);
  const job = await waitFor(
    'a scheduled job',
    async () => {
      const r = await api('GET', '/v1/projects/ticking/jobs');
      return r.body.jobs?.find((j: { trigger: string }) => j.trigger === 'schedule');
    },
    80_000,
  );
  const firedAfterS = (new Date(job.created_at).getTime() - createdAt) / 1000;
  assert.ok(firedAfterS <= 70, `the schedule fired ${firedAfterS} s after it was made`);
  assert.equal(job.schedule_name, name);
  assert.equal(await server.stop(), 0, server.output());
});
