-- 0005_counts: finished jobs counted with the moves, an index for listing the dead letters, and
-- a retention per queue.
--
-- `jobyard status` counted every job through the jobs_status index (100 ms with 340,000
-- finished jobs). Pending and running jobs are few and still counted from that index; finished
-- ones are counted here: the backend adjusts a row in the same write transaction as every move
-- into or out of a finished status (ack, reap, cancel, retry, purge), once per statement and
-- (queue, status). Not by triggers: any trigger on the jobs table costs every claim and ack
-- (SQLite can no longer update a row in one pass), 20-30% of the drain rate.
CREATE TABLE job_counts (
    queue  TEXT    NOT NULL,
    status TEXT    NOT NULL,  -- completed, failed or cancelled
    n      INTEGER NOT NULL,
    PRIMARY KEY (queue, status)
) STRICT, WITHOUT ROWID;

INSERT INTO job_counts (queue, status, n)
SELECT queue, status, count(*) FROM jobs
WHERE status IN ('completed', 'failed', 'cancelled')
GROUP BY queue, status;

-- Listing failed (or cancelled) jobs newest first walked the whole table backwards when there
-- were few of them. This partial index holds only those jobs (rare: a job enters it when it
-- dies), ordered by id within a status (an index on (status) ends with the rowid).
CREATE INDEX jobs_dead ON jobs (status) WHERE status IN ('failed', 'cancelled');

-- Seconds a completed job of the queue is kept after it finished (the workers purge older
-- ones); NULL: kept until purged, or the worker's --retention.
ALTER TABLE queues ADD COLUMN retention REAL;
