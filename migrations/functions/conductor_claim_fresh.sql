-- Whether the claim's walk may lock a queued task row at once, before the
-- touched rows it passes over (migrations/functions/conductor_claim.sql,
-- "The walk", issue #36). Its one home: change it here (docs/database.md, "Functions").
--
-- p_xmax is the row's xmax as read now, p_snap the claim's snapshot and
-- p_next that snapshot's xmax as a bigint (the first xid not yet assigned
-- when it was taken). Answers false only for a row a transaction concurrent
-- with the snapshot has touched (locked, or locked and updated): a claimer
-- that took it after our snapshot, so that locking it would raise 40001.
-- Such a transaction's xid is one the snapshot saw running (in its xip) or
-- one assigned after it, and then close to p_next: claims are short, so the
-- xids assigned between a snapshot and its walk number a few thousand at
-- most. Anything else is taken, and the row lock decides as it always did.
--
-- xmax is a 32-bit xid; pg_visible_in_snapshot takes an xid8 (epoch and
-- xid). Every xid a live row can carry is within 2^31 of p_next (wraparound
-- protection freezes older ones), so the xmax's xid8 is p_next plus the
-- signed 32-bit distance d from p_next's low 32 bits to the xmax: negative
-- for an xid assigned before the snapshot, zero or positive for one assigned
-- after it.
--
-- A row's xmax can also be a multixact id (two transactions locked it at
-- once), which is not an xid: the arithmetic then names an arbitrary xid. A
-- multixact id far from the xid counter (the usual case: multixacts are
-- rarer than xids) lands outside [p_next, p_next + 65536) and outside the
-- xip, and is taken. Before this function (found in review) the walk passed
-- over every row whose xmax did not name an xid visible in the snapshot, so
-- a multixact id ahead of the xid counter kept an old task behind younger
-- ones for as long as younger work kept arriving (touched rows are tried
-- only when no untouched one can be locked): a starved task. Now such a row
-- is passed over only while its id lies within 65,536 xids ahead of the
-- counter, or names an xid running at the snapshot: bounded, and it is still
-- taken whenever nothing untouched is claimable.
--
-- Immutable SQL without FROM, so the planner inlines it into the claim.
-- History: issue #36 (the walk's untouched rows first; the window for
-- multixacts, from review).

create or replace function conductor_claim_fresh(p_xmax xid, p_snap pg_snapshot, p_next bigint)
returns boolean
language sql immutable parallel safe
as $$
  select case
    when p_xmax = 0 then true
    -- assigned at or after the snapshot: a concurrent claimer when near
    when ((p_xmax::text::bigint - p_next % 4294967296 + 6442450944) % 4294967296 - 2147483648) >= 0
      then ((p_xmax::text::bigint - p_next % 4294967296 + 6442450944) % 4294967296 - 2147483648) >= 65536
    -- before the first xid ever (a multixact id read as an xid)
    when p_next + ((p_xmax::text::bigint - p_next % 4294967296 + 6442450944) % 4294967296 - 2147483648) < 0
      then true
    -- assigned before: untouched unless it was running at the snapshot
    else pg_visible_in_snapshot(
           (p_next + ((p_xmax::text::bigint - p_next % 4294967296 + 6442450944) % 4294967296 - 2147483648))::text::xid8,
           p_snap)
  end
$$;
