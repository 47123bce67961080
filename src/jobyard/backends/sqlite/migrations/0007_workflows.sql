-- 0007_workflows: chains and groups. A workflow step waits (status 'waiting') for the jobs it
-- runs after; the completion of the last of them makes it pending.
--
-- The jobs table is rebuilt because SQLite cannot alter a CHECK constraint, and the status list
-- gains 'waiting'. The rows keep their ids, and sqlite_sequence keeps the highest id ever handed
-- out, so ids of purged jobs are still never reused.
--
-- New columns, all small and before the wide ones:
--   workflow_id  the workflow a job belongs to (jobs_list by workflow reads jobs_workflow);
--   fanin        how many inputs the job waits for (its depends_on; 0 for a plain job);
--   fanout       how many jobs wait for it (its dependents): the completion reads it from the
--                row it updates anyway, so a plain job's ack runs no statement of the release;
--   waits        inputs not completed yet, decremented by the release.
-- The links are rows of job_links, never a list on the job: a join of 10,000 members keeps
-- only its counter on its own row, so each completion rewrites a few bytes, not 10,000 ids.

CREATE TABLE jobs_new (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    queue               TEXT    NOT NULL,
    name                TEXT    NOT NULL,
    status              TEXT    NOT NULL DEFAULT 'pending'
                        CHECK (status IN ('waiting', 'pending', 'running', 'completed', 'failed',
                                          'cancelled')),
    priority            INTEGER NOT NULL DEFAULT 0,
    attempts            INTEGER NOT NULL DEFAULT 0,
    max_attempts        INTEGER NOT NULL,
    backoff             TEXT,
    timeout             REAL,
    lease               REAL    NOT NULL,
    delivery            TEXT    NOT NULL DEFAULT 'at_least_once'
                        CHECK (delivery IN ('at_least_once', 'at_most_once')),
    run_at              REAL    NOT NULL,
    created_at          REAL    NOT NULL,
    started_at          REAL,
    finished_at         REAL,
    worker_id           TEXT,
    token               TEXT,
    lease_expires_at    REAL,
    idempotency_key     TEXT,
    parent_id           TEXT,
    workflow_id         TEXT,
    fanin               INTEGER NOT NULL DEFAULT 0,
    fanout              INTEGER NOT NULL DEFAULT 0,
    waits               INTEGER NOT NULL DEFAULT 0,
    -- The wide columns last (see 0001_initial.sql), then those 0006 added.
    payload             TEXT    NOT NULL,
    result              TEXT,
    error               TEXT,
    cancel_requested_at REAL,
    cancelled_by        TEXT,
    progress            REAL,
    progress_note       TEXT
) STRICT;

INSERT INTO jobs_new (
    id, queue, name, status, priority, attempts, max_attempts, backoff, timeout, lease, delivery,
    run_at, created_at, started_at, finished_at, worker_id, token, lease_expires_at,
    idempotency_key, parent_id, payload, result, error, cancel_requested_at, cancelled_by,
    progress, progress_note
)
SELECT id, queue, name, status, priority, attempts, max_attempts, backoff, timeout, lease,
       delivery, run_at, created_at, started_at, finished_at, worker_id, token, lease_expires_at,
       idempotency_key, parent_id, payload, result, error, cancel_requested_at, cancelled_by,
       progress, progress_note
FROM jobs;

-- The old table's counter, not max(id): the newest jobs may have been purged.
DELETE FROM sqlite_sequence WHERE name = 'jobs_new';
INSERT INTO sqlite_sequence (name, seq) SELECT 'jobs_new', seq FROM sqlite_sequence WHERE name = 'jobs';

DROP TABLE jobs;
ALTER TABLE jobs_new RENAME TO jobs;

-- The indexes of 0001 and 0005, as they were (their comments say why each exists).
CREATE INDEX jobs_pending ON jobs (queue, priority DESC, run_at, id) WHERE status = 'pending';
CREATE UNIQUE INDEX jobs_idempotency ON jobs (queue, idempotency_key)
    WHERE idempotency_key IS NOT NULL AND status IN ('pending', 'running');
CREATE INDEX jobs_status ON jobs (status, queue, finished_at);
CREATE INDEX jobs_dead ON jobs (status) WHERE status IN ('failed', 'cancelled');

-- A workflow's jobs, newest first (the index ends with the rowid). Partial: plain jobs, the
-- bulk of the table, are not in it and cost it nothing on insert.
CREATE INDEX jobs_workflow ON jobs (workflow_id) WHERE workflow_id IS NOT NULL;

-- One row per (step, input): the step's depends_on in order by the primary key, its inputs'
-- dependents through job_links_input, which is also how a completion finds whom it releases.
CREATE TABLE job_links (
    job_id   INTEGER NOT NULL,  -- the waiting step
    position INTEGER NOT NULL,  -- the input's place in the step's depends_on
    input_id INTEGER NOT NULL,
    PRIMARY KEY (job_id, position)
) STRICT, WITHOUT ROWID;

CREATE INDEX job_links_input ON job_links (input_id, job_id);
