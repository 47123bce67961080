-- Workers: heartbeats and the list of live workers.
-- (Conventions for every file here: README.md in this folder.)

-- name: workers_beat
-- Register or refresh (or, stopping, remove) one worker, and forget the ones silent for longer
-- than their own forget_after. The forgetting skips the beating worker's own row: one
-- statement must not both delete and upsert a row.
WITH clock AS (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8) AS now
),
forgotten AS (
    DELETE FROM workers AS w
    USING clock
    WHERE w.id <> %(id)s::text AND w.last_seen < clock.now - w.forget_after
),
stopped AS (
    DELETE FROM workers WHERE id = %(id)s::text AND %(stopping)s::bool
),
beat AS (
    INSERT INTO workers (id, host, pid, queues, concurrency, started_at, last_seen, forget_after)
    SELECT %(id)s::text, %(host)s::text, %(pid)s::int4, %(queues)b::text[],
           %(concurrency)s::int4, %(started_at)s::float8, clock.now, %(forget_after)s::float8
    FROM clock
    WHERE NOT %(stopping)s::bool
    ON CONFLICT (id) DO UPDATE
    SET host = excluded.host, pid = excluded.pid, queues = excluded.queues,
        concurrency = excluded.concurrency, started_at = excluded.started_at,
        last_seen = excluded.last_seen, forget_after = excluded.forget_after
)
SELECT 1;

-- name: workers_list
-- The live workers; those silent for longer than their own forget_after are deleted on the
-- way (a killed worker cannot unregister, and there may be no other worker left to forget it).
-- The SELECT sees the rows as they were before the DELETE, hence its own filter.
WITH clock AS (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8) AS now
),
gone AS (
    DELETE FROM workers AS w
    USING clock
    WHERE w.last_seen < clock.now - w.forget_after
    RETURNING w.id
)
SELECT w.id, w.host, w.pid, w.queues, w.concurrency, w.started_at, w.last_seen
FROM workers AS w, clock
WHERE w.last_seen >= clock.now - w.forget_after
  AND (SELECT count(*) FROM gone) >= 0
ORDER BY w.started_at, w.id;
