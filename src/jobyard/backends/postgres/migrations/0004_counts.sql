-- 0004_counts: the number of finished jobs per queue and status, kept with the moves; and a
-- retention per queue.
--
-- `jobyard status` counted the finished partitions in full (600 ms with 340,000 finished jobs).
-- Pending and running jobs are few and still counted (exactly, from their small partitions);
-- finished ones are counted here instead: every statement that moves a job into or out of a
-- finished status (jobs_ack, leases_reap, jobs_cancel, jobs_retry, jobs_purge) adjusts its row
-- in the same statement, so the count is exact in every snapshot. A statement adjusts its rows
-- in (queue, status) order, so two statements never wait on each other's rows in a cycle.
--
-- The rows are updated on every acknowledgement: no index covers n, so each update is a HOT
-- update that page pruning reclaims, and the free space of fillfactor 50 keeps the new version
-- on the same page. The worker's maintenance vacuums this table with the hot partitions.
CREATE TABLE job_counts (
    queue  text   NOT NULL,
    status text   NOT NULL,  -- completed, failed or cancelled
    n      bigint NOT NULL,
    PRIMARY KEY (queue, status)
) WITH (fillfactor = 50);

INSERT INTO job_counts (queue, status, n)
SELECT queue, status, count(*)
FROM jobs
WHERE status IN ('completed', 'failed', 'cancelled')
GROUP BY queue, status;

-- Seconds a completed job of the queue is kept after it finished (the workers purge older
-- ones); NULL: kept until purged, or the worker's --retention.
ALTER TABLE queues ADD COLUMN retention float8;

-- Completions since an instant, per queue (stats_get's "completed in the last minute"). Its cost
-- is the number of those jobs, read through the finished_at index: a function of its own so
-- that `SET enable_seqscan = off` holds while it is planned. Without it, a cutoff the planner
-- cannot see at plan time (a stable expression, or a parameter with no statistics, as when
-- autovacuum is off and nothing ever analyzes the partition) is given a third of the rows, and
-- the plan read the whole finished partition on every `jobyard status`.
CREATE FUNCTION jobyard_completed_since(since float8, queues text[])
RETURNS TABLE (queue text, n bigint)
LANGUAGE sql STABLE
SET enable_seqscan = off
AS $$
    SELECT c.queue, count(*)
    FROM jobs_completed AS c
    WHERE c.finished_at >= since
      AND (cardinality(queues) = 0 OR c.queue = ANY(queues))
    GROUP BY c.queue
$$;
