-- 0013_oldest_head: stats_get's oldest due job is each priority level's head of the line, read
-- in the claim index's own order: a few probes per level, whatever the backlog.
--
-- jobyard_oldest_pending (0009_throughput.sql) asked each level for its smallest run_at, which
-- the claim index no longer yields first since it holds the fair round between the priority
-- and run_at (0008_limits.sql, 0011_fair_rounds.sql): every job of the level was read from the
-- heap and sorted (200,000 pending: 199,936 heap reads, 150-300 ms on every status read and
-- scrape). Now each level's first job in claim order is read: the first index entry of the
-- level (its lowest round's earliest run_at) when it is due; else, since a round's first entry
-- is its earliest, that round holds nothing due, and the first due entry of a later round is
-- read. Outside fair queues every job is in round 0 (turn 0), so the first entry is the
-- level's earliest job and the result is the oldest due job exactly; the second probe finds no
-- later round. In a fair queue it is the head of the line (see base.QueueStats), and the
-- second probe passes over the index entries of the jobs not yet due of the rounds before the
-- first due one (delayed jobs take their turn when enqueued), the same ones the claim passes
-- over, never a heap row of them.
--
-- Planned without sequential scans (a partition emptied by a drain keeps its pages until the
-- tidy vacuums: a planner that thinks it empty reads them all), and without JIT.
CREATE OR REPLACE FUNCTION jobyard_oldest_pending(queues text[], now float8)
RETURNS TABLE (queue text, run_at float8)
LANGUAGE sql STABLE
SET enable_seqscan = off
SET jit = off
AS $$
    -- The queues asked, or those holding pending jobs (a skip scan of the claim index, one
    -- probe per queue); then each queue's (queue, priority) levels that hold pending jobs, one
    -- probe per level (the next one: the highest priority below the last). The old skip scan
    -- went from queue to queue with the asked queues as a filter, so asking for a queue named
    -- after a large one read all of the large one's entries.
    WITH RECURSIVE found (queue) AS (
        (SELECT j.queue FROM jobs_pending AS j
         WHERE cardinality(queues) = 0
         ORDER BY j.queue
         LIMIT 1)
        UNION ALL
        SELECT (SELECT j.queue FROM jobs_pending AS j
                WHERE j.queue > f.queue
                ORDER BY j.queue
                LIMIT 1)
        FROM found AS f
        WHERE f.queue IS NOT NULL
    ), scope (queue) AS (
        SELECT f.queue FROM found AS f WHERE f.queue IS NOT NULL
        UNION
        SELECT unnest(queues)
    ), levels (queue, p) AS (
        SELECT s.queue, (SELECT j.priority FROM jobs_pending AS j
                         WHERE j.queue = s.queue
                         ORDER BY j.priority DESC
                         LIMIT 1)
        FROM scope AS s
        UNION ALL
        SELECT l.queue, (SELECT j.priority FROM jobs_pending AS j
                         WHERE j.queue = l.queue AND j.priority < l.p
                         ORDER BY j.priority DESC
                         LIMIT 1)
        FROM levels AS l
        WHERE l.p IS NOT NULL
    )
    SELECT l.queue, min(coalesce(CASE WHEN f.run_at <= now THEN f.run_at END, later.run_at))
    FROM levels AS l
    CROSS JOIN LATERAL (
        -- The level's first entry in claim order: its lowest round's earliest job.
        SELECT j.run_at, (j.turn - 1) / 4 AS round
        FROM jobs_pending AS j
        WHERE j.queue = l.queue AND j.priority = l.p
        ORDER BY (j.turn - 1) / 4, j.run_at, j.id
        LIMIT 1
    ) AS f
    LEFT JOIN LATERAL (
        -- Only when that one is not due (a one-time filter): the first due job of a later round.
        SELECT j.run_at
        FROM jobs_pending AS j
        WHERE f.run_at > now
          AND j.queue = l.queue AND j.priority = l.p
          AND (j.turn - 1) / 4 > f.round AND j.run_at <= now
        ORDER BY (j.turn - 1) / 4, j.run_at, j.id
        LIMIT 1
    ) AS later ON true
    WHERE l.p IS NOT NULL
    GROUP BY l.queue
    HAVING min(coalesce(CASE WHEN f.run_at <= now THEN f.run_at END, later.run_at)) IS NOT NULL
$$;

-- The counts of the pending and running jobs (jobyard_live_counts, 0010_dead_lines.sql) read
-- the claim index and the running queue index only (index-only scans): no heap page of a
-- pending job once the store's own tidy has vacuumed the partition (store_tidy, which the
-- workers' maintenance runs; autovacuum may be off), about 0.2 us per job. Their plan's cost
-- grows with the backlog and passes jit_above_cost past about 1.5 million pending jobs, where
-- compiling it would cost more than the count: never compiled.
ALTER FUNCTION jobyard_live_counts(text[]) SET jit = off;
