-- Claims that cannot cross projects or be lost (issues #28 and #35).
--
-- * Workers are scoped to projects: `projects` lists the project ids a worker
--   may claim tasks of, null for every project. A writer of project A whose
--   script steals a runner's token then gets nothing of project B, because
--   the claim statement itself never hands out a task outside the scope.
-- * Ephemeral workers: a token good for one claim. `claimed_lease` is the
--   lease of that claim; the token works while that attempt runs and stops
--   when it ends (WORKER_BY_TOKEN, lib/scheduler/worker-token.ts).
-- * The lease id is chosen by the caller, before the statement is sent, so a
--   claim whose reply was lost (the connection dropped after the commit) can
--   be given back by lease id (task_attempts.lease_id is unique: the index is
--   there already).
-- * Idempotent claims: the runner's Idempotency-Key is kept on the attempt;
--   the same worker repeating a claim with that key while the lease lives is
--   answered the same attempt instead of a new one (writing only that it was).

alter table workers
  add column projects text[],
  add column ephemeral boolean not null default false,
  add column claimed_lease uuid;

-- repeated_at: when a keyed claim was answered this attempt again. A lease
-- that was answered again may be in its runner's hands, so it is never given
-- back (releaseClaim): the first answer's loss is then the repeat's gain.
alter table task_attempts
  add column claim_key text constraint task_attempts_claim_key_check check (length(claim_key) <= 200),
  add column repeated_at timestamptz;

-- A repeated claim finds its attempt by (worker, key). Partial: claims sent
-- without a key add nothing to it.
create index task_attempts_claim_key on task_attempts (worker_id, claim_key)
  where claim_key is not null;

drop function conductor_claim(uuid, text[], integer);

-- conductor_claim as in 004, with the worker's project scope applied in both
-- searches (the takeover and the queue), the caller's lease id, the repeat of
-- a keyed claim, and an ephemeral worker's one claim. Still one statement run
-- at REPEATABLE READ (the pool's session default); an empty claim of a
-- worker that is not ephemeral writes nothing.
--
-- Not covered: a claim statement that reaches the server only after its
-- client gave up on it and its give-back found nothing (a frozen connection
-- whose bytes arrive after the thaw) commits a lease nobody holds; a repeat
-- with its key still gets it, else it expires and is taken over.
create function conductor_claim(
  p_worker uuid, p_labels text[], p_lease_s integer, p_lease_id uuid, p_key text
)
returns setof conductor_claimed
language plpgsql volatile
set enable_sort = off
set enable_bitmapscan = off
set lock_timeout = '5s'
as $$
declare
  v_worker workers;
  v_trusted boolean;
  v_id uuid;
  v_takeover boolean := false;
  v_task tasks;
  v_outputs jsonb;
begin
  select * into v_worker from workers w where w.id = p_worker;
  if not found then
    return;
  end if;
  v_trusted := not v_worker.untrusted;

  -- The same claim again (its reply was lost): the attempt it started, while
  -- its lease lives, answered as it was, and marked answered again so that
  -- no give-back of the first answer takes it from the runner now holding it.
  -- A give-back that locked the attempt first makes this update raise 40001,
  -- and the retry finds the task queued and claims anew.
  if p_key is not null then
    select t.* into v_task
      from task_attempts a
      join tasks t on t.id = a.task_id and t.lease_id = a.lease_id
     where a.worker_id = p_worker and a.claim_key = p_key
       and t.state = 'running' and t.lease_expires_at > now()
     limit 1;
    if v_task.id is not null then
      update task_attempts set repeated_at = now() where lease_id = v_task.lease_id;
    end if;
  end if;

  if v_task.id is null then
    -- An ephemeral worker has one claim; the route answers 401 after it.
    if v_worker.ephemeral and v_worker.claimed_lease is not null then
      return;
    end if;

    -- Takeover of an expired lease first, as in 004, within the scope.
    select t.id into v_id
      from tasks t
     where t.state = 'running'
       and t.lease_expires_at < now()
       and t.attempt < t.max_attempts
       and not t.cancel_requested
       and not exists (
             select 1 from task_attempts a
              where a.task_id = t.id and a.attempt = t.attempt
                and a.started_at + make_interval(secs => t.timeout_s) < now())
       and t.trusted = v_trusted
       and t.labels <@ p_labels
       and (select j.state = 'running'
                   and (v_worker.projects is null or j.project_id = any (v_worker.projects))
              from jobs j where j.id = t.job_id)
     order by t.lease_expires_at
     limit 1
     for update of t skip locked;
    if v_id is not null then
      v_takeover := true;
      update task_attempts a
         set outcome = 'lost', result_state = 'queued', transient = true,
             error = 'lease expired: the runner stopped reporting; claimed again',
             finished_at = now()
        from tasks t
       where t.id = v_id and a.task_id = t.id and a.attempt = t.attempt;
    else
      -- The scope is checked on the job row the state is read from: a task
      -- of a project outside it is passed over like one of a job that is not
      -- running, so a scoped worker walks past other projects' queued tasks.
      select t.id into v_id
        from tasks t
       where t.state = 'queued'
         and t.trusted = v_trusted
         and t.labels <@ p_labels
         and (select j.state = 'running'
                     and (v_worker.projects is null or j.project_id = any (v_worker.projects))
                from jobs j where j.id = t.job_id)
       order by t.job_created_at, t.position
       limit 1
       for update of t skip locked;
      if v_id is null then
        return;
      end if;
    end if;

    -- The ephemeral worker's one claim. Two claims of one ephemeral token at
    -- once: the second to write this row raises 40001 (REPEATABLE READ), and
    -- its retry sees claimed_lease set and claims nothing.
    -- It is seen now too: the token check's `seen` leaves this row to us.
    if v_worker.ephemeral then
      update workers set claimed_lease = p_lease_id, last_seen_at = now() where id = p_worker;
    end if;

    -- A takeover is a requeue and a claim at once: queued_at restarts as on
    -- any requeue, so if this claim is given back (releaseClaim) the queue
    -- timeout counts from now, not from when the task was first queued.
    update tasks t
       set state = 'running',
           attempt = t.attempt + 1,
           lease_id = p_lease_id,
           worker_id = p_worker,
           lease_expires_at = now() + make_interval(secs => p_lease_s),
           started_at = coalesce(t.started_at, now()),
           queued_at = case when v_takeover then now() else t.queued_at end
     where t.id = v_id
    returning t.* into v_task;

    insert into task_attempts (task_id, attempt, lease_id, worker_id, claim_key)
    values (v_task.id, v_task.attempt, v_task.lease_id, p_worker, p_key);
  end if;

  -- As in 004: the needs' outputs are final before a task is queued, and
  -- visible in this snapshot.
  if cardinality(v_task.needs) = 0 then
    v_outputs := '{}';
  else
    select coalesce(jsonb_object_agg(
             (select n.name from tasks n where n.id = e.need_id),
             (select jsonb_object_agg(o.name, o.value)
                from task_outputs o where o.task_id = e.need_id)), '{}')
      into v_outputs
      from task_needs e
     where e.task_id = v_task.id
       and exists (select 1 from task_outputs o where o.task_id = e.need_id);
  end if;

  return query
  select v_task, j.project_id, j.sha, j.ref, j.trusted and v_task.trusted, p.repo_url,
         p.forge_token_enc, v_outputs
    from jobs j
    join projects p on p.id = j.project_id
   where j.id = v_task.job_id;
end
$$;
