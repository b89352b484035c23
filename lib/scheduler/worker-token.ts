/**
 * The worker a bearer token belongs to, as CTEs for statements that
 * authenticate and act in one round trip: `worker` (id, name, labels,
 * ephemeral, claimed_lease; no row for an unknown or revoked token, whose
 * SHA-256 is `$1`, nor for an ephemeral worker whose one attempt has ended)
 * and `seen`, which records that the worker was seen, at most once a minute,
 * so a polling runner writes nothing between those minutes. In the
 * scheduler, below lib/app, so its fast completion and lib/app's claim and
 * requireWorker share it.
 *
 * An ephemeral worker's token works until it claims and then for as long as
 * that attempt runs under its lease (migrations/007): task_attempts.lease_id
 * is unique, so the check is one index lookup. `seen` leaves an ephemeral
 * worker that has not claimed yet alone: its claim writes that row in the
 * same statement (conductor_claim), and a row may be written once per
 * statement.
 */
/**
 * WORKER_BY_TOKEN for a completion of the lease in parameter `leaseParam`
 * (`$3`, say): an ephemeral worker's token also authenticates the completion
 * of its one lease after that attempt has ended, so a repeated completion
 * (its reply was lost) is answered as a repeat instead of a 401.
 */
export function workerByTokenFor(leaseParam: string | null): string {
  const completing = leaseParam ? `or w.claimed_lease = ${leaseParam}::uuid` : '';
  return `
  worker as (
    select w.id, w.name, w.labels, w.ephemeral, w.claimed_lease
      from workers w
     where w.token_hash = $1 and not w.revoked
       and (not w.ephemeral or w.claimed_lease is null ${completing}
            or exists (select 1 from task_attempts a
                         join tasks t on t.id = a.task_id and t.lease_id = a.lease_id
                        where a.lease_id = w.claimed_lease and t.state = 'running'))
  ), seen as (
    update workers x set last_seen_at = now()
      from worker w
     where x.id = w.id
       and not (w.ephemeral and w.claimed_lease is null)
       and (x.last_seen_at is null or x.last_seen_at < now() - interval '60 seconds')
  )`;
}

export const WORKER_BY_TOKEN = workerByTokenFor(null);
