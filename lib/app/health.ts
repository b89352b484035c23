import type { AppContext } from '../context.ts';

/**
 * GET /v1/health: answers once the database does; behind a closed idle gate
 * it answers `{"ok": true, "idle": true}` from the gate, without a
 * connection (the database may be paused, and a health check must not wake it).
 */
export async function checkHealth(ctx: Pick<AppContext, 'pool' | 'gate'>): Promise<{
  ok: true;
  idle?: true;
}> {
  if (ctx.gate && !(await ctx.gate.mayHaveWork())) return { ok: true, idle: true };
  await ctx.pool.query('select 1');
  return { ok: true };
}
