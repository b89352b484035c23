// A newer job of the same commit and ref supersedes an older one; the older
// one's "cancelled" is kept quiet only when the newer job reports under the
// same status context, that is with the same trust. Under the other context
// (an untrusted job superseded by a trusted one of the same commit, as when a
// bot's branch is pushed again by a person) nothing newer would replace it,
// and its context would be left pending on the forge.
import assert from 'node:assert/strict';
import test from 'node:test';
import { createJob } from '../../lib/scheduler/index.ts';
import { sha } from '../helpers/fixtures.ts';
import { schedulerDatabase } from '../helpers/scheduler.ts';

const db = await schedulerDatabase(import.meta.url);
const { pool } = db;

async function statusesOf(jobId: string): Promise<string[]> {
  const { rows } = await pool.query<{ state: string; description: string }>(
    'select state, description from status_outbox where job_id = $1 order by id',
    [jobId],
  );
  return rows.map((r) => `${r.state}: ${r.description}`);
}

for (const older of [true, false]) {
  test(`an older ${older ? 'trusted' : 'untrusted'} job of the same commit superseded by a trusted one ${older ? 'posts nothing more' : 'posts its cancel under its own context'}`, async () => {
    const project = await db.makeProject({ cancelSuperseded: true });
    // Statuses are recorded only for a project the forge can be told about.
    await pool.query(
      `update projects set forge_token_enc = 'sealed', repo_url = 'https://forge.test/x' where id = $1`,
      [project],
    );
    const base = {
      projectId: project,
      ref: 'refs/heads/deps',
      sha: sha(7),
      trigger: 'push' as const,
    };
    const first = await createJob(pool, { ...base, trusted: older });
    const second = await createJob(pool, { ...base, trusted: true });
    assert.deepEqual(second.superseded, [first.job.id]);
    const posted = await statusesOf(first.job.id);
    assert.ok(posted.length > 0, 'the older job recorded its creation status');
    if (older) {
      assert.ok(!posted.some((s) => s.startsWith('error')), posted.join('; '));
    } else {
      assert.match(posted.at(-1) ?? '', /^error: cancelled: superseded by job #2/);
    }
  });
}
