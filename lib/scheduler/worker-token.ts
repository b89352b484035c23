/**
 * The worker a bearer token belongs to, as CTEs for statements that
 * authenticate and act in one round trip: `worker` (id, name, labels; no row
 * for an unknown or revoked token, whose SHA-256 is `$1`) and `seen`, which
 * records that the worker was seen, at most once a minute, so a polling runner
 * writes nothing between those minutes. In the scheduler, below lib/app, so
 * its fast completion and lib/app's claim and requireWorker share it.
 */
export const WORKER_BY_TOKEN = `
  worker as (
    select id, name, labels from workers where token_hash = $1 and not revoked
  ), seen as (
    update workers x set last_seen_at = now()
      from worker w
     where x.id = w.id
       and (x.last_seen_at is null or x.last_seen_at < now() - interval '60 seconds')
  )`;
