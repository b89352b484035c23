-- Part of the follow-up's promotion (lib/scheduler/progress.ts). Its one
-- home: change it here (docs/database.md, "Functions").
--
-- Whether a finished task has a child that is waiting with every need
-- finished (a blocked need is unfinished): the candidates of a promotion.
-- Written as loops so that the order of the walk is fixed whatever the
-- statistics say: each child of the task, then that child's needs one by one
-- in primary-key order (random with respect to the order tasks finish in),
-- stopping at the first unfinished need. As one query, statistics gathered
-- while a job had nothing waiting led the planner to scan every unfinished
-- task of the database for each child instead, and a fan-in of 1,000 parents
-- paid O(n) per parent. Bitmap scans are off because they return edges in
-- insertion order, which is the order parents finish in, so the walk would
-- meet every finished need before an unfinished one.
-- STABLE: every query reads with the snapshot of the statement that calls it.
--
-- History: migrations 002 (first), 013 (blocked).

create or replace function conductor_child_ready(p_parent uuid) returns boolean
language plpgsql stable
set enable_seqscan = off
set enable_bitmapscan = off
as $$
declare
  v_child uuid;
  v_need uuid;
  v_ready boolean;
begin
  for v_child in select e.task_id from task_needs e where e.need_id = p_parent loop
    if (select w.state from tasks w where w.id = v_child) = 'waiting' then
      v_ready := true;
      for v_need in select n.need_id from task_needs n where n.task_id = v_child loop
        if (select p.state from tasks p where p.id = v_need) in ('waiting', 'queued', 'running', 'blocked') then
          v_ready := false;
          exit;
        end if;
      end loop;
      if v_ready then
        return true;
      end if;
    end if;
  end loop;
  return false;
end
$$;
