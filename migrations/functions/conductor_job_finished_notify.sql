-- The trigger of migration 024 on jobs: when a job finishes (inserted or
-- updated into success, failed or cancelled), writes a notification_outbox
-- row for each of its project's notifications that asked to hear of it, in
-- the transaction that finished the job. "fixed" is a success whose ref's
-- previous finished job (success or failed; a cancelled one is no outcome)
-- failed. Branch patterns are matched when the row is sent
-- (lib/notify/branches.ts): a row whose branch does not match is skipped.
create or replace function conductor_job_finished_notify() returns trigger
language plpgsql as $$
declare
  v_previous text;
begin
  if tg_op = 'UPDATE' and old.state = new.state then
    return null;
  end if;
  -- Most projects have no notifications: one index probe, nothing else.
  if not exists (select 1 from notifications n where n.project_id = new.project_id) then
    return null;
  end if;
  if new.state = 'success' then
    select j.state into v_previous
      from jobs j
     where j.project_id = new.project_id and j.ref = new.ref and j.id <> new.id
       and j.state in ('success', 'failed') and j.finished_at <= new.finished_at
     order by j.finished_at desc
     limit 1;
  end if;
  insert into notification_outbox (notification_id, job_id, job_state, reason)
  select n.id, new.id, new.state,
         case when new.state = 'failed' and 'failed' = any (n.on_events) then 'failed'
              when new.state = 'success' and v_previous = 'failed' and 'fixed' = any (n.on_events)
                then 'fixed'
              else 'always' end
    from notifications n
   where n.project_id = new.project_id
     and ('always' = any (n.on_events)
          or (new.state = 'failed' and 'failed' = any (n.on_events))
          or (new.state = 'success' and v_previous = 'failed' and 'fixed' = any (n.on_events)));
  return null;
end
$$;
