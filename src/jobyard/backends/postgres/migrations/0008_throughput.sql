-- 0008_throughput: completed and failed jobs per queue and minute, kept with the moves.
--
-- The dashboard's chart and `jobyard status` read the last hour and day from here, so the
-- history survives every restart of workers and readers. jobs_ack and leases_reap add to the
-- current minute's row of each queue they settle jobs of, in the same statement (a CTE beside
-- job_counts, rows in queue order after job_counts' (queue, status) order, so two statements
-- never wait on each other's rows in a cycle); jobs_expire deletes minutes older than a day and
-- an hour. A queue writes at most one row a minute: 1,500 rows (about 100 KB with the index) a
-- queue at most.
--
-- As job_counts: no index covers the counts, so each update is a HOT update that page pruning
-- reclaims, and the free space of fillfactor 50 keeps the new version on the same page.
CREATE TABLE throughput (
    queue     text   NOT NULL,
    minute    bigint NOT NULL,  -- epoch seconds of the minute's start
    completed bigint NOT NULL,
    failed    bigint NOT NULL,
    PRIMARY KEY (queue, minute)
) WITH (fillfactor = 50);

-- The dashboard finds a job by its idempotency key, whatever its status: a partial index (one
-- per partition) that holds only the jobs that have a key, so a job without one costs nothing.
CREATE INDEX jobs_key ON jobs (idempotency_key) WHERE idempotency_key IS NOT NULL;
