-- The one-column CHECK constraints of the two tables every task cycle writes
-- (a claim updates `tasks` and inserts into `task_attempts`; a completion
-- updates both) become domains (issue #36).
--
-- Why: PostgreSQL evaluates every CHECK constraint of a table on every
-- INSERT and UPDATE of it, whichever columns the statement sets, and before
-- it can evaluate them it reads each one back from its stored form and
-- compiles it again, once per statement (ExecConstraints). A cycle made four
-- such statements over fifteen constraints: measured with `perf`, 9% of the
-- server's CPU at one claimer went there. A domain's check runs only when a
-- value is assigned to a column of that domain (the claim sets `state` and
-- `attempt`, not `timeout_s`), from a form the server keeps compiled.
-- Measured, fresh databases taking turns at 16 claimers: server CPU per cycle
-- 0.93x, cycles per second 1.09x (docs/benchmarks.md).
--
-- What a row may hold is unchanged: the same predicates, now on the columns'
-- types; a value outside them still fails with 23514 (check_violation).
-- The enumerations keep their constraint names (tasks_state_check,
-- tasks_run_when_check, task_attempts_outcome_check): test/db/schema.test.ts
-- reads their values back and compares them with lib/states.ts.
-- The two checks that relate columns stay table constraints (a domain sees
-- one value): tasks_check (attempt <= max_attempts) and tasks_check1 (a
-- running task has a lease).
--
-- Applying it takes both tables' ACCESS EXCLUSIVE lock while every row is
-- checked against its new type (the types are the same underneath: nothing
-- is rewritten).
--
-- A connection that prepared the claim before this migration fails its
-- claims afterwards with 42804 ("attribute 3 has wrong type"): the plan of
-- `(c.task).*` expects the old column types. Code from this migration on
-- closes such a connection and claims again on a new one (isStalePlan in
-- lib/db/statement.ts). Code from before it does not: while a deploy from an
-- older version runs (this migration first, then the functions' new code),
-- the old functions' warm connections answer claims with 500 until they are
-- replaced. The claim rolled back; runners poll again (docs/deploy.md).

create domain conductor_task_state as text
  constraint tasks_state_check
  check (value in ('waiting', 'queued', 'running', 'blocked', 'success', 'failed', 'skipped',
                   'cancelled'));
create domain conductor_run_when as text
  constraint tasks_run_when_check check (value in ('on_success', 'on_failure', 'always'));
create domain conductor_concurrency_mode as text
  constraint tasks_concurrency_mode_check
  check (value in ('queue', 'replace_pending', 'cancel_running'));
create domain conductor_attempt_outcome as text
  constraint task_attempts_outcome_check
  check (value in ('success', 'failed', 'cancelled', 'lost', 'timed_out'));
create domain conductor_claim_key as text
  constraint conductor_claim_key_check check (length(value) <= 200);
-- attempt (of a task: none yet is 0), position
create domain conductor_count as integer constraint conductor_count_check check (value >= 0);
-- max_attempts, timeout_s, queue_timeout_s, concurrency_limit, an attempt's number
create domain conductor_positive as integer
  constraint conductor_positive_check check (value >= 1);
-- an attempt's log size
create domain conductor_byte_count as bigint
  constraint conductor_byte_count_check check (value >= 0);

alter table tasks
  drop constraint tasks_state_check,
  drop constraint tasks_run_when_check,
  drop constraint tasks_concurrency_mode_check,
  drop constraint tasks_attempt_check,
  drop constraint tasks_position_check,
  drop constraint tasks_max_attempts_check,
  drop constraint tasks_timeout_s_check,
  drop constraint tasks_queue_timeout_s_check,
  drop constraint tasks_concurrency_limit_check,
  alter column state type conductor_task_state,
  alter column run_when type conductor_run_when,
  alter column concurrency_mode type conductor_concurrency_mode,
  alter column attempt type conductor_count,
  alter column position type conductor_count,
  alter column max_attempts type conductor_positive,
  alter column timeout_s type conductor_positive,
  alter column queue_timeout_s type conductor_positive,
  alter column concurrency_limit type conductor_positive;

alter table task_attempts
  drop constraint task_attempts_outcome_check,
  drop constraint task_attempts_claim_key_check,
  drop constraint task_attempts_attempt_check,
  drop constraint task_attempts_log_size_check,
  alter column outcome type conductor_attempt_outcome,
  alter column claim_key type conductor_claim_key,
  alter column attempt type conductor_positive,
  alter column log_size type conductor_byte_count;

-- Changing a column's type drops its statistics; gather them again rather
-- than leave the planner without them until autovacuum comes by. Not on an
-- empty table (a new database; changed in issue #36's sixth session, after
-- this migration had run on deployed databases, which it does not run on
-- again): analysed empty, the planner takes a table for as small as it is,
-- and the plans a session makes while it is small (sequential scans) stay
-- cached as it grows, until autovacuum's analyse; never analysed, it
-- assumes at least ten pages and looks rows up by key
-- (test/e2e/runner-plans.test.ts).
do $$
begin
  if exists (select 1 from tasks) then
    analyze tasks;
  end if;
  if exists (select 1 from task_attempts) then
    analyze task_attempts;
  end if;
end
$$;
