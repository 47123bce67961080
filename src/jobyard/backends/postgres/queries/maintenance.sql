-- Maintenance: dead-row tidying and the vacuum of the tables that churn.
-- (Conventions for every file here: README.md in this folder.)

-- name: autovacuum_setting
SELECT current_setting('autovacuum');

-- name: tidy_lock
-- A session advisory lock on the maintenance's own autocommit connection, taken without
-- waiting: one worker vacuums at a time, the others skip their turn.
SELECT pg_try_advisory_lock(hashtextextended(%(key)s::text, 0));

-- name: tidy_unlock
SELECT pg_advisory_unlock(hashtextextended(%(key)s::text, 0));

-- name: tidy_dead
-- Dead, live and inserted-since-the-last-vacuum rows of the tables that churn (the statistics
-- collector's figures, flushed by each session about once a second: estimates, which is all a
-- threshold needs). Live rows: the lesser of n_live_tup and the rows ever inserted less those
-- ever deleted. n_live_tup restarts from each vacuum's estimate, and a vacuum skips the pages
-- it found all-visible (those a drain emptied among them: TRUNCATE false keeps them) and
-- counts them at the table's old density: a pending partition drained of 300,000 jobs was
-- still reckoned at 90,000 live rows, so its threshold waited for 23,000 dead ones, and the
-- next drain's claims stepped over their index entries. The counters are exact but reset with
-- the statistics (pg_stat_reset, a crash); either error only makes the threshold lower.
SELECT c.relname, s.n_dead_tup,
       least(s.n_live_tup, greatest(s.n_tup_ins - s.n_tup_del, 0)) AS n_live,
       s.n_ins_since_vacuum
FROM pg_stat_user_tables AS s
JOIN pg_class AS c ON c.oid = s.relid
WHERE s.relid IN (
    to_regclass('jobs_waiting'), to_regclass('jobs_pending'), to_regclass('jobs_running'),
    to_regclass('job_keys'), to_regclass('job_counts'), to_regclass('workers'),
    to_regclass('limit_buckets'), to_regclass('throughput')
)
ORDER BY c.relname;


-- Every move of a job between statuses deletes its row from one partition and inserts it in
-- another, so the waiting, pending and running partitions (and job_keys, job_counts, workers)
-- gather a dead row per move, and the waiting one another per decrement of a join's counter.
-- Autovacuum, where it runs and keeps up, removes them; where it is off or lags, claims wade
-- through dead index entries and the partitions grow without bound. The
-- worker's maintenance runs these when a table passes its threshold (StoreTidyParams) in dead
-- rows, or in rows inserted since its last vacuum: a vacuum also records the table's size for
-- the planner, and one that found the pending partition empty just before a large batch
-- arrived left it believing that partition empty (every claim then chose a plan that read the
-- whole backlog), so a partition that grew is vacuumed again soon.
-- SKIP_LOCKED: never wait for another vacuum or a migration. INDEX_CLEANUP ON: the dead entries
-- of the claim index are what slows claims, never leave them for later. TRUNCATE false: the
-- final truncation would take an ACCESS EXCLUSIVE lock that blocks claims; a partition vacuumed
-- this often reuses its free space instead.

-- name: vacuum_jobs_waiting
VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, TRUNCATE false) jobs_waiting;

-- name: vacuum_jobs_pending
VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, TRUNCATE false) jobs_pending;

-- name: vacuum_jobs_running
VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, TRUNCATE false) jobs_running;

-- name: vacuum_job_keys
VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, TRUNCATE false) job_keys;

-- name: vacuum_job_counts
VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, TRUNCATE false) job_counts;

-- name: vacuum_throughput
VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, TRUNCATE false) throughput;

-- name: throughput_prune
-- Minutes older than the history keeps (jobs_expire, run by the workers' maintenance): a range
-- of the primary key per queue at most; nothing most of the time.
DELETE FROM throughput
WHERE minute < coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8)
               - %(keep)s::float8;

-- name: vacuum_workers
VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, TRUNCATE false) workers;

-- name: vacuum_limit_buckets
VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, TRUNCATE false) limit_buckets;

-- name: limit_buckets_forget
-- store_tidy: a rate bucket whose tat is past is the same as none (an idle key leaves no row).
DELETE FROM limit_buckets
WHERE tat <= coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8);
