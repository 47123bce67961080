-- 0009_throughput: completed and failed jobs per queue and minute, kept with the moves.
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

-- The run_at of each queue's oldest due pending job (stats_get): a skip scan of the claim index
-- jobs_pending_claim, one probe per (queue, priority) level that holds pending jobs (the next
-- level: a lower priority of the same queue, else the next queue), then the first entry of
-- each level, its smallest run_at. Never a scan of the pending jobs. A function of its own so
-- that `SET enable_seqscan = off` holds while it is planned: right after a drain the pending
-- partition holds no live row but every dead one until it is vacuumed, and a planner that
-- thinks it empty read all of them (100 ms after a million claims).
CREATE FUNCTION jobyard_oldest_pending(queues text[], now float8)
RETURNS TABLE (queue text, run_at float8)
LANGUAGE sql STABLE
SET enable_seqscan = off
AS $$
    WITH RECURSIVE levels (queue, p) AS (
        (SELECT j.queue, j.priority FROM jobs_pending AS j
         WHERE cardinality(queues) = 0 OR j.queue = ANY(queues)
         ORDER BY j.queue, j.priority DESC
         LIMIT 1)
        UNION ALL
        SELECT n.queue, n.priority
        FROM levels AS l CROSS JOIN LATERAL (
            (SELECT j.queue, j.priority FROM jobs_pending AS j
             WHERE j.queue = l.queue AND j.priority < l.p
             ORDER BY j.queue, j.priority DESC
             LIMIT 1)
            UNION ALL
            (SELECT j.queue, j.priority FROM jobs_pending AS j
             WHERE j.queue > l.queue AND (cardinality(queues) = 0 OR j.queue = ANY(queues))
             ORDER BY j.queue, j.priority DESC
             LIMIT 1)
            LIMIT 1
        ) AS n
    )
    SELECT o.queue, min(o.first)
    FROM (
        SELECT l.queue, (
            SELECT j.run_at FROM jobs_pending AS j
            WHERE j.queue = l.queue AND j.priority = l.p
            ORDER BY j.queue, j.priority DESC, j.run_at
            LIMIT 1
        ) AS first
        FROM levels AS l
    ) AS o
    WHERE o.first <= now
    GROUP BY o.queue
$$;
