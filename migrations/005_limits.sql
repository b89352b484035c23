-- Limits on what hostile input can make the control plane hold (issue #14,
-- docs/limits.md): how long a task may wait in the queue, and how much log a
-- job may store.

-- A queued task that no worker claims within this many seconds fails (the
-- sweep, lib/scheduler/sweep.ts). The pipeline's queue_timeout; 24 hours when
-- it says nothing. The default fills existing rows without a rewrite.
alter table tasks
  add column queue_timeout_s integer not null default 86400
    constraint tasks_queue_timeout_s_check check (queue_timeout_s > 0);

-- The sweep's walk over the queue, oldest first. queue_timeout_s rides in the
-- index so the walk reads no table rows for tasks still within their time. A
-- task enters it when it is queued (created, promoted, requeued), which the
-- claim index already costs, and never on a claim or a heartbeat.
create index tasks_queued on tasks (queued_at) include (queue_timeout_s) where state = 'queued';

-- A job's log quota, counted in blocks: each attempt reserves the job's
-- bytes a block (lib/logs.ts, LOG_QUOTA_BLOCK) at a time as its log grows,
-- so this row is written once a block per attempt rather than once a chunk,
-- and the tasks of one job that log at once rarely wait for each other on
-- it. `reserved` is the sum over the job's attempts of their log size
-- rounded up to a block. A row of its own, not a column of jobs: the job row
-- is what cancel, settle and promotion lock. Counted from this migration on.
create table job_log_usage (
  job_id uuid primary key references jobs (id) on delete cascade,
  reserved bigint not null check (reserved >= 0)
);
