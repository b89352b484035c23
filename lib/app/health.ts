import type { Queryable } from '../db/index.ts';

/** GET /v1/health: answers once the database does. */
export async function checkHealth(db: Queryable): Promise<{ ok: true }> {
  await db.query('select 1');
  return { ok: true };
}
