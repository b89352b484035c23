-- A queued task's waiting reason where runner pools are concerned
-- (lib/scheduler/views.ts, issue #51; pools and launches in
-- migrations/023_pools.sql). Null without pools, so a stack without them
-- shows the reasons it always did. With pools:
-- * its launch failed and is tried again: the pool, the failure, the wait;
-- * a pool serves it and no worker can take it: which pool, and its runners;
-- * neither a pool nor a worker serves it: "no runner or pool serves ...".
create or replace function conductor_pool_reason(
  p_task uuid, p_labels text[], p_trusted boolean, p_project text
) returns text
language plpgsql stable
as $$
declare
  v_launch record;
  v_pool record;
begin
  if not exists (select 1 from pools) then
    return null;
  end if;
  select l.pool, l.error, l.tries, l.retry_at into v_launch
    from runner_launches l
   where l.task_id = p_task and l.state = 'pending' and l.error is not null
   order by l.created_at desc
   limit 1;
  if found then
    return format('launching a runner in pool %s failed (try %s): %s; next try in %s s',
                  v_launch.pool, v_launch.tries, v_launch.error,
                  greatest(0, ceil(extract(epoch from v_launch.retry_at - now())))::int);
  end if;
  if exists (select 1 from workers w
              where not w.revoked and w.untrusted = not p_trusted and p_labels <@ w.labels
                and (w.projects is null or p_project = any (w.projects))
                and not (w.ephemeral and w.claimed_lease is not null)) then
    return null;
  end if;
  select p.name, p.max_runners,
         (select count(*) from runner_launches l where l.pool = p.name and l.state <> 'ended') as live
    into v_pool
    from pools p
   where p.untrusted = not p_trusted and p_labels <@ p.labels
     and (p.projects is null or p_project = any (p.projects))
   order by p.name
   limit 1;
  if found then
    return format('waiting for a runner of pool %s (%s of %s at work)',
                  v_pool.name, v_pool.live, v_pool.max_runners);
  end if;
  return format('no runner or pool serves %s%s tasks of project %s',
                case when cardinality(p_labels) > 0
                     then 'labels ' || array_to_string(p_labels, ', ') || ' for '
                     else '' end,
                case when p_trusted then 'trusted' else 'untrusted' end,
                p_project);
end
$$;
