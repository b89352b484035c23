// Superseding goes by when the API received each delivery (#32), in either
// order of creation: the push received later stands and the one received
// earlier is cancelled, whichever reached the database first (a delivery
// queued while the database resumed reaches it last).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createJob } from '../../lib/scheduler/index.ts';
import { testDatabase } from '../helpers/db.ts';
import { makeProject } from '../helpers/fixtures.ts';

const db = await testDatabase(import.meta.filename);
const projectId = await makeProject(db.pool, { cancelSuperseded: true });

const state = async (id: string) =>
  (await db.pool.query<{ state: string }>('select state from jobs where id = $1', [id])).rows[0]!
    .state;

for (const order of ['the earlier first', 'the later first (the earlier was queued)'] as const) {
  test(`two pushes to one branch, ${order}: the later received stands`, async () => {
    const ref = `refs/heads/${order.startsWith('the earlier') ? 'a' : 'b'}`;
    const earlier = { sha: 'e'.repeat(40), receivedAt: new Date('2026-12-03T10:00:00Z') };
    const later = { sha: 'f'.repeat(40), receivedAt: new Date('2026-12-03T10:00:05Z') };
    const make = (d: typeof earlier) =>
      createJob(db.pool, { projectId, ref, trigger: 'push', trusted: true, ...d });
    const first = await make(order.startsWith('the earlier') ? earlier : later);
    const second = await make(order.startsWith('the earlier') ? later : earlier);
    const [earlierJob, laterJob] = order.startsWith('the earlier')
      ? [first.job, second.job]
      : [second.job, first.job];
    assert.equal(await state(earlierJob.id), 'cancelled');
    assert.equal(await state(laterJob.id), 'pending');
    const { rows } = await db.pool.query<{ error: string | null }>(
      'select error from jobs where id = $1',
      [earlierJob.id],
    );
    assert.match(rows[0]!.error ?? '', /superseded by job #\d+/);
  });
}
