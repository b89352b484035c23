import type { AppContext } from '../context.ts';
import { schemaStatus } from '../db/index.ts';
import { log } from '../log.ts';
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

/**
 * GET /v1/ready: whether this server may take traffic: the database answers
 * and its schema is the code's (every migration applied with the checksum of
 * its file, every function file applied as it is; lib/db/migrate.ts). A
 * proxy or an orchestrator probes it; it always asks the database (behind
 * the idle gate, /v1/health is the probe that does not wake it).
 */
export async function checkReady(
  ctx: Pick<AppContext, 'pool'>,
): Promise<{ ready: true } | { ready: false; reason: string }> {
  let status: Awaited<ReturnType<typeof schemaStatus>>;
  try {
    status = await schemaStatus(ctx.pool);
  } catch (err) {
    log('warn', 'readiness: the database did not answer', { err });
    return { ready: false, reason: 'the database does not answer' };
  }
  return status.current ? { ready: true } : { ready: false, reason: status.reason };
}
