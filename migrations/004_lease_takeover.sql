-- A lost runner's task runs again within a minute, on AWS too (issue #19): a
-- claim takes over an expired lease itself instead of waiting for the sweep.
-- conductor_claim as in 003, with the takeover of an expired lease first (a
-- lost runner's task goes before the queue, in the order its lease ran out,
-- so a long queue cannot starve it); still one statement, and an empty claim writes nothing (both
-- searches only read).

create or replace function conductor_claim(p_worker uuid, p_labels text[], p_lease_s integer)
returns setof conductor_claimed
language plpgsql volatile
set enable_sort = off
set enable_bitmapscan = off
set lock_timeout = '5s'
as $$
declare
  v_trusted boolean;
  v_id uuid;
  v_task tasks;
  v_outputs jsonb;
begin
  select not w.untrusted into v_trusted from workers w where w.id = p_worker;
  if v_trusted is null then
    return;
  end if;

  -- A running task whose lease has expired, with attempts left, is
  -- claimable like a queued one, and before one: its runner went silent,
  -- and waiting for the sweep would add up to its interval to the time the
  -- task is lost.
  -- tasks_leases (lease_expires_at, where running) is walked from the
  -- oldest lease and stops at the first unexpired one, so the cost follows
  -- the expired leases, which the sweep keeps few. A completion or a
  -- heartbeat of the old runner that committed after this snapshot makes
  -- the lock raise 40001, and the retry sees the task done or alive.
  select t.id into v_id
    from tasks t
   where t.state = 'running'
     and t.lease_expires_at < now()
     and t.attempt < t.max_attempts
     and not t.cancel_requested
     -- A task past its timeout has used its time: the sweep fails it.
     and not exists (
           select 1 from task_attempts a
            where a.task_id = t.id and a.attempt = t.attempt
              and a.started_at + make_interval(secs => t.timeout_s) < now())
     and t.trusted = v_trusted
     and t.labels <@ p_labels
     and (select j.state from jobs j where j.id = t.job_id) = 'running'
   order by t.lease_expires_at
   limit 1
   for update of t skip locked;
  if v_id is not null then
    -- The expired attempt ends as a lost runner's does in the sweep: a
    -- transient failure, counted, then a new attempt under a new lease
    -- below. The old lease_id stops matching, so the old runner's
    -- heartbeat, logs and completion answer 409.
    update task_attempts a
       set outcome = 'lost', result_state = 'queued', transient = true,
           error = 'lease expired: the runner stopped reporting; claimed again',
           finished_at = now()
      from tasks t
     where t.id = v_id and a.task_id = t.id and a.attempt = t.attempt;
  else
    -- trusted = v_trusted is the leading column of tasks_claimable: the scan
    -- stays inside the worker's pool, in claim order, and labels narrow it.
    select t.id into v_id
      from tasks t
     where t.state = 'queued'
       and t.trusted = v_trusted
       and t.labels <@ p_labels
       and (select j.state from jobs j where j.id = t.job_id) = 'running'
     order by t.job_created_at, t.position
     limit 1
     for update of t skip locked;
    if v_id is null then
      return;
    end if;
  end if;

  update tasks t
     set state = 'running',
         attempt = t.attempt + 1,
         lease_id = gen_random_uuid(),
         worker_id = p_worker,
         lease_expires_at = now() + make_interval(secs => p_lease_s),
         started_at = coalesce(t.started_at, now())
   where t.id = v_id
  returning t.* into v_task;

  insert into task_attempts (task_id, attempt, lease_id, worker_id)
  values (v_task.id, v_task.attempt, v_task.lease_id, p_worker);

  -- The needs' outputs are final before a task is queued, and a task this
  -- claim could lock was last changed before its snapshot (REPEATABLE READ):
  -- the promotion, and every output committed before it, are visible.
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

  -- Trusted only if both the job and the task say so: the assignment hands
  -- out secrets and the repository token on this flag alone.
  return query
  select v_task, j.project_id, j.sha, j.ref, j.trusted and v_task.trusted, p.repo_url,
         p.forge_token_enc, v_outputs
    from jobs j
    join projects p on p.id = j.project_id
   where j.id = v_task.job_id;
end
$$;
