/**
 * The worker a bearer token belongs to, as a CTE for statements that
 * authenticate and act in one round trip: `worker` (id, name, labels,
 * ephemeral, claimed_lease; no row for an unknown or revoked token, whose
 * SHA-256 is `$1`, nor for an ephemeral worker whose one attempt has ended).
 * Reading it records that the worker was seen, at most once a minute, so a
 * polling runner writes nothing between those minutes. The rules live in
 * conductor_worker_by_token (migrations/functions/conductor_worker_by_token.sql),
 * which the success procedure calls too. In the scheduler, below lib/app, so
 * its fast completion and lib/app's claim and requireWorker share it.
 */
/**
 * WORKER_BY_TOKEN for a completion of the lease in parameter `leaseParam`
 * (`$3`, say): an ephemeral worker's token also authenticates the completion
 * of its one lease after that attempt has ended, so a repeated completion
 * (its reply was lost) is answered as a repeat instead of a 401.
 */
export function workerByTokenFor(leaseParam: string | null): string {
  const lease = leaseParam ? `${leaseParam}::uuid` : 'null::uuid';
  return `
  worker as (select * from conductor_worker_by_token($1, ${lease}))`;
}

export const WORKER_BY_TOKEN = workerByTokenFor(null);
