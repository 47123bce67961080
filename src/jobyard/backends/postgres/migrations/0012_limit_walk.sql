-- 0012_limit_walk: limits_stats reads a bounded number of each queue's pending jobs, in claim
-- order, instead of counting every pending job that carries a key.
--
-- What a limit of a job name holds back (its due pending jobs, and those of its keys at their
-- key_concurrency) is counted by name, which no index of the pending partition holds for every
-- job: an exact count reads every pending row (300 ms for 200,000). A status read must stay
-- cheap under any backlog, so each queue's first `walk` pending jobs are read through the claim
-- index (10,000: about 15 ms), and limits_stats says when that was not all of them
-- (base.LimitStats.exact). The running jobs, few, are all counted.
--
-- Planned as jobyard_live_counts is (0010_dead_lines.sql): through the indexes only, whatever
-- the statistics say of a partition that held many rows; and without JIT, which a plan priced
-- with enable_seqscan off reaches (its cost then passes jit_above_cost) and which compiled the
-- old count for 540 ms on every call.
CREATE FUNCTION jobyard_limit_walk(queues text[], walk int, now float8)
RETURNS TABLE (queue text, name text, limit_key text, pending bigint, due bigint, running bigint)
LANGUAGE sql STABLE
SET enable_seqscan = off
SET enable_bitmapscan = off
SET max_parallel_workers_per_gather = 0
SET jit = off
AS $$
    -- The queues asked, or those holding pending jobs: a skip scan of the claim index, one
    -- probe per queue.
    WITH RECURSIVE found (queue) AS (
        (SELECT p.queue FROM jobs_pending AS p
         WHERE cardinality(queues) = 0
         ORDER BY p.queue
         LIMIT 1)
        UNION ALL
        SELECT (SELECT p.queue FROM jobs_pending AS p
                WHERE p.queue > f.queue
                ORDER BY p.queue
                LIMIT 1)
        FROM found AS f
        WHERE f.queue IS NOT NULL
    ), scope (queue) AS (
        SELECT f.queue FROM found AS f WHERE f.queue IS NOT NULL
        UNION
        SELECT unnest(queues)
    )
    SELECT s.queue, w.name, w.limit_key, count(*), count(*) FILTER (WHERE w.run_at <= now), 0
    FROM scope AS s CROSS JOIN LATERAL (
        -- The claim's order: the claim index read in order, one heap row per job.
        SELECT p.name, p.limit_key, p.run_at
        FROM jobs_pending AS p
        WHERE p.queue = s.queue
        ORDER BY p.priority DESC, ((p.turn - 1) / 4), p.run_at, p.id
        LIMIT walk
    ) AS w
    GROUP BY s.queue, w.name, w.limit_key
    UNION ALL
    SELECT r.queue, r.name, r.limit_key, 0, 0, count(*)
    FROM jobs_running AS r
    WHERE cardinality(queues) = 0 OR r.queue = ANY(queues)
    GROUP BY r.queue, r.name, r.limit_key
$$;

-- The old count, and the index of the keyed pending jobs it alone read (every keyed insert
-- wrote an entry into it).
DROP FUNCTION jobyard_limit_counts(text[]);
DROP INDEX jobs_pending_keys;
