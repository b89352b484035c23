-- A job's log quota is checked against the sum of its attempts' log sizes,
-- rounded up to blocks and read only when a chunk takes an attempt into a new
-- block (lib/logs.ts, checkJobQuota); nothing is written for it.
-- job_log_usage (005), a counter row per job written in the append's
-- transaction, is dropped: measured with sixteen tasks of one job appending
-- at once, the appends that reserved a block together lost serialization
-- races on that row (REPEATABLE READ) until they gave up, where the sum
-- conflicts with nothing and cost no more than no check at all (a job of 500
-- tasks, 16 of them logging).
drop table job_log_usage;
