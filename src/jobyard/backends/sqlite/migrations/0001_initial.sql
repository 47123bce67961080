-- 0001_initial: jobs, queues and workers.
--
-- Times are REAL epoch seconds (UTC). Tables are STRICT so a value of the wrong type can never
-- reach the backend's row decoding: a payload is always TEXT, possibly not JSON, never a BLOB.

CREATE TABLE jobs (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,  -- AUTOINCREMENT: ids never reused
    queue            TEXT    NOT NULL,
    name             TEXT    NOT NULL,
    status           TEXT    NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'running', 'completed', 'failed', 'cancelled')),
    priority         INTEGER NOT NULL DEFAULT 0,
    attempts         INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL,
    backoff          TEXT,
    timeout          REAL,
    lease            REAL    NOT NULL,
    delivery         TEXT    NOT NULL DEFAULT 'at_least_once'
                     CHECK (delivery IN ('at_least_once', 'at_most_once')),
    run_at           REAL    NOT NULL,
    created_at       REAL    NOT NULL,
    started_at       REAL,
    finished_at      REAL,
    worker_id        TEXT,
    token            TEXT,
    lease_expires_at REAL,
    idempotency_key  TEXT,
    parent_id        TEXT,
    -- The wide columns come last: SQLite decodes a record left to right, so the claim and the
    -- indexes never walk past a large payload to reach the small columns.
    payload          TEXT    NOT NULL,
    result           TEXT,
    error            TEXT
) STRICT;

-- The claim's index: exactly its ORDER BY within one queue, so a claim reads the first due
-- entries and stops. Partial, so finished jobs (the bulk of a busy table) cost it nothing.
CREATE INDEX jobs_pending ON jobs (queue, priority DESC, run_at, id) WHERE status = 'pending';

-- Idempotency keys are held only while a job is pending or running (seed 001); the partial
-- unique index makes that hold across processes, and INSERT ... ON CONFLICT DO NOTHING uses it.
CREATE UNIQUE INDEX jobs_idempotency ON jobs (queue, idempotency_key)
    WHERE idempotency_key IS NOT NULL AND status IN ('pending', 'running');

-- Stats (counts by status and queue, recent completions) and purge (finished_at) read this
-- covering index instead of the table with its payloads. It also serves the claim's count of a
-- queue's running jobs (status, queue) and the reaper's scan of running jobs, which are few:
-- no separate index on running jobs is worth its cost on every claim and ack.
CREATE INDEX jobs_status ON jobs (status, queue, finished_at);

CREATE TABLE queues (
    name            TEXT    PRIMARY KEY,
    max_concurrency INTEGER,
    max_attempts    INTEGER,
    backoff         TEXT,
    max_pending     INTEGER,
    paused          INTEGER NOT NULL DEFAULT 0
) STRICT;

CREATE TABLE workers (
    id          TEXT    PRIMARY KEY,
    host        TEXT    NOT NULL,
    pid         INTEGER NOT NULL,
    queues      TEXT    NOT NULL,  -- JSON array of queue names
    concurrency INTEGER NOT NULL,
    started_at  REAL    NOT NULL,
    last_seen   REAL    NOT NULL
) STRICT;
