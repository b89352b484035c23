import type { AppContext } from '../context.ts';
import { VERSION } from '../version.ts';

/**
 * GET /v1/health: answers once the database does, with the package's
 * version; behind a closed idle gate it answers `{"ok": true, "version",
 * "idle": true}` from the gate, without a connection (the database may be
 * paused, and a health check must not wake it).
 */
export async function checkHealth(ctx: Pick<AppContext, 'pool' | 'gate'>): Promise<{
  ok: true;
  version: string;
  idle?: true;
}> {
  if (ctx.gate && !(await ctx.gate.mayHaveWork()))
    return { ok: true, version: VERSION, idle: true };
  await ctx.pool.query('select 1');
  return { ok: true, version: VERSION };
}
