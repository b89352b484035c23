-- Whether the claim's walk may lock a queued task row at once, before the
-- touched rows it passes over (migrations/functions/conductor_claim.sql,
-- "The walk", issue #36). Its one home: change it here (docs/database.md, "Functions").
--
-- p_xmax is the row's xmax as read now, p_snap the claim's snapshot and
-- p_next that snapshot's xmax as a bigint: latestCompletedXid + 1 when it
-- was taken. Every xid below it had ended by then or is in the snapshot's
-- xip; one at or above it was running when the snapshot was taken or was
-- assigned after it (an xid assigned before the snapshot can sit at or above
-- it while its transaction runs: found in review of #36, issue #47).
-- Answers false only for a row a transaction concurrent with the snapshot
-- has touched (locked, or locked and updated): a claimer that took it after
-- our snapshot, so that locking it would raise 40001. Such a transaction's
-- xid is one the snapshot saw running (in its xip), or one at or above
-- p_next that the xid counter has reached. Anything else is taken, and the
-- row lock decides as it always did.
--
-- xmax is a 32-bit xid; pg_visible_in_snapshot takes an xid8 (epoch and
-- xid). Every xid a live row can carry is within 2^31 of p_next (wraparound
-- protection freezes older ones), so the xmax's xid8 is p_next plus the
-- signed 32-bit distance d from p_next's low 32 bits to the xmax: negative
-- for an xid below p_next, zero or positive for one at or above it.
--
-- A row's xmax can also be a multixact id (two transactions locked it at
-- once), which is not an xid: the arithmetic then names an arbitrary xid.
-- At or above p_next (d >= 0), the xid counter tells them apart: age() is
-- the distance from the counter as this transaction first asked (PostgreSQL
-- reads it once per transaction, and this is the first to ask in a claim),
-- positive for an xid already assigned, zero or negative for a number the
-- counter has not reached, which no xid in any row can be: a multixact id
-- ahead of the xid counter. Before #47 every number within 65,536 of p_next
-- counted as touched, and a task whose xmax was a multixact id just ahead
-- of the counter was passed over for younger ones, by claims whose snapshots
-- followed all its lockers, until the counter passed it.
-- What is left: a multixact id that the counter has reached (one between
-- p_next and the counter as first asked: xids assigned during a claim's
-- walk, a few at most), or below p_next that equals an xid running at the
-- snapshot, still counts as touched, for this claim only (the next claim's
-- snapshot moves on); it is taken whenever nothing untouched is claimable.
-- An xid assigned after this transaction first asked reads as ahead of the
-- counter, and its row is locked at once as before #36 (SKIP LOCKED while
-- its claimer runs, 40001 once it committed): order and ownership are the
-- row lock's, as always. So is a call inside a transaction that asked the
-- counter (or took an xid) before its snapshot.
--
-- SQL without FROM, so the planner inlines it into the claim (STABLE, as
-- age() is).
-- History: issue #36 (the walk's untouched rows first; the window for
-- multixacts, from review); issue #47 (the counter instead of the window).

create or replace function conductor_claim_fresh(p_xmax xid, p_snap pg_snapshot, p_next bigint)
returns boolean
language sql stable parallel safe
as $$
  select case
    when p_xmax = 0 then true
    -- at or above the snapshot's xmax: a concurrent claimer once the counter
    -- has reached it, else a multixact id
    when ((p_xmax::text::bigint - p_next % 4294967296 + 6442450944) % 4294967296 - 2147483648) >= 0
      then age(p_xmax) <= 0
    -- before the first xid ever (a multixact id read as an xid)
    when p_next + ((p_xmax::text::bigint - p_next % 4294967296 + 6442450944) % 4294967296 - 2147483648) < 0
      then true
    -- below it: untouched unless it was running at the snapshot
    else pg_visible_in_snapshot(
           (p_next + ((p_xmax::text::bigint - p_next % 4294967296 + 6442450944) % 4294967296 - 2147483648))::text::xid8,
           p_snap)
  end
$$;
