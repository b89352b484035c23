-- The worker a bearer token belongs to (lib/scheduler/worker-token.ts: the
-- runner routes' claim, their token check, and the success procedure
-- conductor_finish_success). Its one home: change it here (docs/database.md,
-- "Functions").
--
-- p_hash is the SHA-256 of the token. Answers the worker (no row for an
-- unknown or revoked token, nor for an ephemeral worker whose one attempt has
-- ended) and records that it was seen, at most once a minute, so a polling
-- runner writes nothing between those minutes.
-- An ephemeral worker's token works until it claims and then for as long as
-- that attempt runs under its lease (migrations/007): task_attempts.lease_id
-- is unique, so the check is one index lookup. With p_lease (a completion of
-- that lease) it also works after that attempt has ended, so a repeated
-- completion (its reply was lost) is answered as a repeat instead of a 401.
-- The seen mark leaves an ephemeral worker that has not claimed yet alone: its
-- claim writes that row (conductor_claim).
--
-- History: a pair of CTEs in lib/scheduler/worker-token.ts (migration 007,
-- issue #16); a function of its own since issue #36, so that the success
-- procedure, which cannot be part of a statement, checks tokens the same way.

create or replace function conductor_worker_by_token(p_hash bytea, p_lease uuid)
returns table (id uuid, name text, labels text[], ephemeral boolean, claimed_lease uuid)
language plpgsql volatile
as $$
#variable_conflict use_column
begin
  return query
  with worker as (
    select w.id, w.name, w.labels, w.ephemeral, w.claimed_lease
      from workers w
     where w.token_hash = p_hash and not w.revoked
       and (not w.ephemeral or w.claimed_lease is null or w.claimed_lease = p_lease
            or exists (select 1 from task_attempts a
                         join tasks t on t.id = a.task_id and t.lease_id = a.lease_id
                        where a.lease_id = w.claimed_lease and t.state = 'running'))
  ), seen as (
    update workers x set last_seen_at = now()
      from worker w
     where x.id = w.id
       and not (w.ephemeral and w.claimed_lease is null)
       and (x.last_seen_at is null or x.last_seen_at < now() - interval '60 seconds')
  )
  select w.id, w.name, w.labels, w.ephemeral, w.claimed_lease from worker w;
end
$$;
