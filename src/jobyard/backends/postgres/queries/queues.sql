-- Queues: configuration (pause, max_concurrency) and the counts.
-- (Conventions for every file here: README.md in this folder.)

-- name: queues_configure
INSERT INTO queues (name, max_concurrency, max_attempts, backoff, max_pending, paused, retention)
VALUES (%(name)s, %(max_concurrency)s::int4, %(max_attempts)s::int4, %(backoff)s::text,
        %(max_pending)s::int4, %(paused)s::bool, %(retention)s::float8)
ON CONFLICT (name) DO UPDATE
SET max_concurrency = excluded.max_concurrency,
    max_attempts = excluded.max_attempts,
    backoff = excluded.backoff,
    max_pending = excluded.max_pending,
    paused = excluded.paused,
    retention = excluded.retention;

-- name: queues_list
SELECT name, max_concurrency, max_attempts, backoff, max_pending, paused, retention
FROM queues
ORDER BY name;

-- name: queues_names
-- The queues holding finished jobs of %(statuses)s: the counts kept with the moves
-- (0004_counts.sql), a few rows, never the partitions (maintenance asks every few seconds).
SELECT queue
FROM job_counts
WHERE status = ANY(%(statuses)b::text[])
GROUP BY queue
HAVING sum(n) > 0
ORDER BY queue;

-- name: stats_get
-- Rows of (queue, kind, n): kind is a status (a count), 'configured' (a queue with settings),
-- or 'recent' (completions in the last minute). An empty queues array means every queue.
-- Only the small pending and running partitions are counted; `status IN (...)` of constants
-- prunes the others at plan time.
SELECT queue, status, count(*)
FROM jobs
WHERE status IN ('pending', 'running')
  AND (cardinality(%(queues)b::text[]) = 0 OR queue = ANY(%(queues)b::text[]))
GROUP BY queue, status
UNION ALL
-- Finished and waiting jobs are not counted: their counts are kept with the moves
-- (0004_counts.sql, 0006_workflows.sql).
SELECT queue, status, n
FROM job_counts
WHERE n <> 0 AND (cardinality(%(queues)b::text[]) = 0 OR queue = ANY(%(queues)b::text[]))
UNION ALL
SELECT name, 'configured', 0
FROM queues
WHERE cardinality(%(queues)b::text[]) = 0 OR name = ANY(%(queues)b::text[])
UNION ALL
-- Through the finished_at index, whatever the planner guesses (see 0004_counts.sql).
SELECT r.queue, 'recent', r.n
FROM jobyard_completed_since(
    coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8) - 60,
    %(queues)b::text[]
) AS r
WHERE %(recent)s::bool  -- a one-time filter: not asked, the function never runs
UNION ALL
-- The oldest due pending job of each queue, as its run_at in microseconds (the column is a
-- count): a skip scan of the claim index in jobyard_oldest_pending (0008_throughput.sql).
SELECT o.queue, 'oldest', (o.run_at * 1000000)::int8
FROM jobyard_oldest_pending(
    %(queues)b::text[],
    coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8)
) AS o;

-- name: throughput_get
-- The minutes that end after now - since, by queue then minute: a range of the primary key.
SELECT queue, minute, completed, failed
FROM throughput
WHERE minute > coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8)
               - %(since)s::float8 - 60
  AND (cardinality(%(queues)b::text[]) = 0 OR queue = ANY(%(queues)b::text[]))
ORDER BY queue, minute;
