-- 0011_turns_index: the index an insert into a fair queue reads its key's latest turn from
-- leaves the claim alone.
--
-- jobs_pending_turns was partial on status = 'pending': every claim from a fair queue took its
-- jobs out of it, and since a fair claim takes one job from each of many keys, those were as
-- many scattered index pages written to the WAL per claim (about 20 of a 64-job claim's 115
-- pages with 100 tenants; bench/limits.py fair_100). jobs_turns does not name status at all, so
-- a claim, an ack or a reap (which change only status and the lease columns) never touch it:
-- SQLite skips an index on an UPDATE that changes none of its columns nor its WHERE. An insert
-- (and a purge) pays it, and the insert finds the key's latest pending turn by walking the
-- key's entries down from its highest turn, no further than the queue's current round (see
-- jobs_insert). It keeps the jobs of fair queues until they are purged, as jobs_status does.
-- Partial on turn <> 0 (turns are never negative), not turn > 0: the insert's query names the
-- same term to use the index, and a `turn > 0` there would be the range SQLite seeks by,
-- instead of `turn >= round`, which bounds the walk.
DROP INDEX jobs_pending_turns;
CREATE INDEX jobs_turns ON jobs (queue, limit_key, turn) WHERE turn <> 0;
