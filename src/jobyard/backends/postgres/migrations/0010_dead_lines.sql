-- 0010_dead_lines: each failed job's dead-letter line, stored when it fails; and the pending
-- and running counts of stats_get read through their indexes.
--
-- The dead letter groups failed jobs by queue, name and base.error_line of the error's last
-- 1,000 characters. dead_groups computed that line from every walked traceback on every read
-- of the page (30 ms for 5,000 failed jobs); now it is computed once, as the row enters the
-- failed partition, and dead_groups reads this short column only.
ALTER TABLE jobs ADD COLUMN dead_line text;

-- base.error_line of the error's last 1,000 characters, by string functions (a regular
-- expression cost four times as much): the first line of the reversed text, trimmed.
CREATE FUNCTION jobyard_error_line(error text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT btrim(reverse(split_part(reverse(rtrim(right(coalesce(error, ''), 1000),
                                                  E' \t\r\n')), E'\n', 1)), E' \t\r')
$$;

-- Every way into the dead letter ends in this partition: an UPDATE that moves a row here runs
-- the destination's BEFORE INSERT triggers (and no other job ever fires it: the hot path of
-- pending, running and completed rows pays nothing).
CREATE FUNCTION jobyard_dead_line() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    NEW.dead_line := jobyard_error_line(NEW.error);
    RETURN NEW;
END
$$;

CREATE TRIGGER jobs_failed_dead_line BEFORE INSERT ON jobs_failed
FOR EACH ROW EXECUTE FUNCTION jobyard_dead_line();

UPDATE jobs_failed SET dead_line = jobyard_error_line(error);

-- stats_get's counts of the pending and running partitions. A partition that held a million
-- pending jobs keeps its pages after they are gone (the tidy vacuums with TRUNCATE false, and
-- autovacuum may be off): a sequential count read all of them (40 ms after a million claims,
-- on every page of the dashboard). Through the claim and queue indexes instead, whose emptied
-- pages a vacuum unlinks: a function of its own so that these settings hold while it is
-- planned (statistics that still think the partition large would otherwise pick a parallel
-- scan, whose workers alone cost 10 ms).
CREATE FUNCTION jobyard_live_counts(queues text[])
RETURNS TABLE (queue text, status text, n bigint)
LANGUAGE sql STABLE
SET enable_seqscan = off
SET enable_bitmapscan = off
SET max_parallel_workers_per_gather = 0
AS $$
    SELECT p.queue, 'pending', count(*)
    FROM jobs_pending AS p
    WHERE cardinality(queues) = 0 OR p.queue = ANY(queues)
    GROUP BY p.queue
    UNION ALL
    SELECT r.queue, 'running', count(*)
    FROM jobs_running AS r
    WHERE cardinality(queues) = 0 OR r.queue = ANY(queues)
    GROUP BY r.queue
$$;

-- limits_stats' counts of the jobs that carry a key, the same way: the pending ones through
-- an index of their own (a job without a key costs nothing in it), the running ones through
-- jobs_running_keys and the queue index, never the partitions' pages.
CREATE INDEX jobs_pending_keys ON jobs_pending (queue, name, limit_key)
WHERE limit_key IS NOT NULL;

CREATE FUNCTION jobyard_limit_counts(queues text[])
RETURNS TABLE (queue text, name text, limit_key text, pending bigint, running bigint)
LANGUAGE sql STABLE
SET enable_seqscan = off
SET enable_bitmapscan = off
SET max_parallel_workers_per_gather = 0
AS $$
    SELECT j.queue, j.name, j.limit_key, count(*) FILTER (WHERE j.status = 'pending'),
           count(*) FILTER (WHERE j.status = 'running')
    FROM (
        SELECT p.queue, p.name, p.limit_key, 'pending' AS status
        FROM jobs_pending AS p
        WHERE p.limit_key IS NOT NULL AND (cardinality(queues) = 0 OR p.queue = ANY(queues))
        UNION ALL
        SELECT r.queue, r.name, r.limit_key, 'running'
        FROM jobs_running AS r
        WHERE cardinality(queues) = 0 OR r.queue = ANY(queues)
    ) AS j
    GROUP BY j.queue, j.name, j.limit_key
$$;
