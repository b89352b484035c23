import type { Queryable } from '../db/index.ts';

/**
 * Whether the database holds anything a claim or the sweep could act on: a
 * job pending or running, or a commit status not yet delivered. A blocked
 * job waits for approval, which opens the gate. Each probe is one partial
 * index's first entry.
 */
export async function hasOpenWork(db: Queryable): Promise<boolean> {
  const { rows } = await db.query<{ open: boolean }>(
    `select exists (select 1 from jobs where state = 'running')
         or exists (select 1 from jobs where state = 'pending')
         or exists (select 1 from status_outbox where result is null) as open`,
  );
  return rows[0]!.open;
}
