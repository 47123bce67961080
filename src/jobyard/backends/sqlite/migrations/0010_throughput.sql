-- 0010_throughput: completed and failed jobs per queue and minute, kept with the moves.
--
-- The dashboard's chart and `jobyard status` read the last hour and day from here, so the
-- history survives every restart of workers and readers. jobs_ack and leases_reap add to a row
-- in the same write transaction as the jobs they settle (once per statement and queue, not per
-- job); jobs_expire deletes minutes older than a day and an hour. A queue writes at most one
-- row a minute: 1,500 rows (about 40 KB) a queue at most.
CREATE TABLE throughput (
    queue     TEXT    NOT NULL,
    minute    INTEGER NOT NULL,  -- epoch seconds of the minute's start
    completed INTEGER NOT NULL,
    failed    INTEGER NOT NULL,
    PRIMARY KEY (queue, minute)
) STRICT, WITHOUT ROWID;

-- The dashboard finds a job by its idempotency key, whatever its status: a partial index that
-- holds only the jobs that have a key (a job without one costs nothing here).
CREATE INDEX jobs_key ON jobs (idempotency_key) WHERE idempotency_key IS NOT NULL;
