-- Queues: configuration (pause, max_concurrency) and the counts.
-- (Conventions for every file here: README.md in this folder.)

-- name: queues_configure
-- The whole row; a queue that stops being fair gives its pending jobs the plain order back
-- (their turns go to 0), in the same statement.
WITH was AS (
    SELECT fair FROM queues WHERE name = %(name)s
),
upsert AS (
    INSERT INTO queues (name, max_concurrency, max_attempts, backoff, max_pending, paused,
                        retention, rate_count, rate_per, rate_burst, key_concurrency,
                        key_rate_count, key_rate_per, key_rate_burst, fair)
    VALUES (%(name)s, %(max_concurrency)s::int4, %(max_attempts)s::int4, %(backoff)s::text,
            %(max_pending)s::int4, %(paused)s::bool, %(retention)s::float8,
            %(rate_count)s::int4, %(rate_per)s::float8, %(rate_burst)s::int4,
            %(key_concurrency)s::int4, %(key_rate_count)s::int4, %(key_rate_per)s::float8,
            %(key_rate_burst)s::int4, %(fair)s::bool)
    ON CONFLICT (name) DO UPDATE
    SET max_concurrency = excluded.max_concurrency,
        max_attempts = excluded.max_attempts,
        backoff = excluded.backoff,
        max_pending = excluded.max_pending,
        paused = excluded.paused,
        retention = excluded.retention,
        rate_count = excluded.rate_count,
        rate_per = excluded.rate_per,
        rate_burst = excluded.rate_burst,
        key_concurrency = excluded.key_concurrency,
        key_rate_count = excluded.key_rate_count,
        key_rate_per = excluded.key_rate_per,
        key_rate_burst = excluded.key_rate_burst,
        fair = excluded.fair
    RETURNING name
)
UPDATE jobs_pending SET turn = 0
WHERE queue = %(name)s AND turn > 0 AND NOT %(fair)s::bool
  AND (SELECT fair FROM was) AND (SELECT count(*) FROM upsert) > 0;

-- name: queues_list
SELECT name, max_concurrency, max_attempts, backoff, max_pending, paused, retention,
       rate_count, rate_per, rate_burst, key_concurrency, key_rate_count, key_rate_per,
       key_rate_burst, fair
FROM queues
ORDER BY name;

-- name: job_limits_sync
-- limits_sync: each (queue, name) given with limits replaces the stored one; one given with
-- none (rate_count .. key_rate_burst all NULL) deletes it.
WITH input AS (
    SELECT *
    FROM unnest(
        %(queues)b::text[], %(names)b::text[], %(rate_counts)b::int4[], %(rate_pers)b::float8[],
        %(rate_bursts)b::int4[], %(key_concurrencies)b::int4[], %(key_rate_counts)b::int4[],
        %(key_rate_pers)b::float8[], %(key_rate_bursts)b::int4[]
    ) AS i (queue, name, rate_count, rate_per, rate_burst, key_concurrency, key_rate_count,
            key_rate_per, key_rate_burst)
),
dropped AS (
    DELETE FROM job_limits AS jl
    USING input AS i
    WHERE jl.queue = i.queue AND jl.name = i.name
      AND i.rate_count IS NULL AND i.key_concurrency IS NULL AND i.key_rate_count IS NULL
)
INSERT INTO job_limits AS jl (queue, name, rate_count, rate_per, rate_burst, key_concurrency,
                              key_rate_count, key_rate_per, key_rate_burst)
SELECT DISTINCT ON (queue, name) *
FROM input
WHERE rate_count IS NOT NULL OR key_concurrency IS NOT NULL OR key_rate_count IS NOT NULL
ORDER BY queue, name
ON CONFLICT (queue, name) DO UPDATE
SET rate_count = excluded.rate_count,
    rate_per = excluded.rate_per,
    rate_burst = excluded.rate_burst,
    key_concurrency = excluded.key_concurrency,
    key_rate_count = excluded.key_rate_count,
    key_rate_per = excluded.key_rate_per,
    key_rate_burst = excluded.key_rate_burst;

-- name: job_limits_list
SELECT queue, name, rate_count, rate_per, rate_burst, key_concurrency, key_rate_count,
       key_rate_per, key_rate_burst
FROM job_limits ORDER BY queue, name;

-- name: limits_walk
-- For limits_stats: per (queue, name, key) of the queues asked (none: those with pending jobs),
-- the pending jobs among each queue's first %(walk)s in claim order and how many of them are
-- due, and every running job: through indexes, never the partitions' pages
-- (jobyard_limit_walk, 0012_limit_walk.sql).
SELECT w.queue, w.name, w.limit_key, w.pending, w.due, w.running
FROM jobyard_limit_walk(
    %(queues)b::text[], %(walk)s::int,
    coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8)
) AS w;

-- name: limit_buckets_list
SELECT queue, job, tat, interval, burst FROM limit_buckets WHERE key = '';
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
-- Only the pending and running partitions are counted, through their indexes
-- (jobyard_live_counts, 0010_dead_lines.sql).
SELECT c.queue, c.status, c.n
FROM jobyard_live_counts(%(queues)b::text[]) AS c
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
-- count): a skip scan of the claim index in jobyard_oldest_pending (0009_throughput.sql).
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
