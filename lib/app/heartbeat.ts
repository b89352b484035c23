// A runner's heartbeat: the attempt's lease extended by the configured lease.
import type { AppContext } from '../context.ts';
import { type HeartbeatResult, heartbeat } from '../scheduler/index.ts';

/** Extends the lease the worker holds on the task's running attempt (a 409 when it holds none). */
export function heartbeatTask(
  ctx: AppContext,
  workerId: string,
  taskId: string,
  leaseId: string,
): Promise<HeartbeatResult> {
  return heartbeat(ctx.pool, workerId, taskId, leaseId, { leaseS: ctx.config.CONDUCTOR_LEASE_S });
}
