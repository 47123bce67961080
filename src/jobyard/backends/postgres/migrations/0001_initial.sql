-- 0001_initial: the data model of seed 001.
--
-- Applied by `jobyard migrate` (PostgresBackend.schema_migrate) in one transaction, under a
-- session advisory lock, into the connection's search_path: the schema named by the URL's
-- `schema=` parameter, else the server's default (public). Names are unqualified on purpose.
--
-- Timestamps are float8 epoch seconds rather than timestamptz. Every timestamp crosses the
-- Backend interface as an epoch float, and a test's frozen clock is one too: float8 keeps the
-- exact value (timestamptz rounds to microseconds), so `now + delay` computed here equals the
-- same sum computed in Python, and no conversion runs on the hot path.
--
-- Payloads, results and backoff policies are text, not jsonb: the contract stores a payload
-- as given (it may be corrupt, and is never trusted), and jsonb would both refuse corrupt text
-- and rewrite valid text (key order, whitespace).

CREATE TABLE queues (
    name            text PRIMARY KEY,
    max_concurrency integer,                -- across every worker of every host; NULL: none
    max_attempts    integer,                -- NULL: the job's own, else 4
    backoff         text,                   -- Backoff.to_json(); NULL: the default policy
    max_pending     integer,                -- NULL: unbounded
    paused          boolean NOT NULL DEFAULT false,
    created_at      float8  NOT NULL DEFAULT extract(epoch FROM statement_timestamp())
);

-- Ids come from one sequence so they increase in enqueue order (the claim order's last
-- tie-breaker) across every partition.
CREATE SEQUENCE jobs_id_seq AS bigint;

CREATE TABLE jobs (
    id               bigint  NOT NULL DEFAULT nextval('jobs_id_seq'),
    status           text    NOT NULL,
    priority         integer NOT NULL DEFAULT 0,
    attempts         integer NOT NULL DEFAULT 0,
    max_attempts     integer NOT NULL,
    run_at           float8  NOT NULL,
    created_at       float8  NOT NULL,
    started_at       float8,
    finished_at      float8,
    lease            float8  NOT NULL,      -- seconds a claim holds the job without a renewal
    lease_expires_at float8,                -- set while running
    timeout          float8,
    queue            text    NOT NULL,
    name             text    NOT NULL,
    delivery         text    NOT NULL DEFAULT 'at_least_once',
    token            text,                  -- the fencing token of the current claim
    worker_id        text,
    idempotency_key  text,
    parent_id        text,
    backoff          text,
    payload          text    NOT NULL,
    result           text,
    error            text,
    -- A unique constraint on a partitioned table must contain the partition key, hence
    -- (id, status); ids are unique on their own because they come from jobs_id_seq.
    PRIMARY KEY (id, status)
) PARTITION BY LIST (status);

ALTER SEQUENCE jobs_id_seq OWNED BY jobs.id;

-- The hot partitions churn: every claim deletes a row from pending and every settlement one
-- from running (a status change moves the row). Vacuum them after a small number of dead rows
-- instead of a fraction of a table that is small by design, so claims do not wade through dead
-- index entries.
CREATE TABLE jobs_pending PARTITION OF jobs FOR VALUES IN ('pending')
    WITH (autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 2000,
          autovacuum_vacuum_insert_scale_factor = 0.0,
          autovacuum_vacuum_insert_threshold = 20000, autovacuum_vacuum_cost_delay = 0);
-- Renewals update a running row in place; the free space lets them be HOT updates (no index
-- column changes: lease_expires_at is deliberately not indexed, the reaper scans this small
-- partition).
CREATE TABLE jobs_running PARTITION OF jobs FOR VALUES IN ('running')
    WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.0,
          autovacuum_vacuum_threshold = 2000, autovacuum_vacuum_cost_delay = 0);
CREATE TABLE jobs_completed PARTITION OF jobs FOR VALUES IN ('completed');
CREATE TABLE jobs_failed PARTITION OF jobs FOR VALUES IN ('failed');
CREATE TABLE jobs_cancelled PARTITION OF jobs FOR VALUES IN ('cancelled');

-- The claim index (seed 001's partial index, made so by the partition): one queue at a time in
-- claim order, so a claim reads exactly the rows it takes.
CREATE INDEX jobs_pending_claim ON jobs_pending (queue, priority DESC, run_at, id);
-- max_concurrency counts the running jobs of a queue.
CREATE INDEX jobs_running_queue ON jobs_running (queue);
-- Retention and "completed in the last minute" read finished jobs by finish time.
CREATE INDEX jobs_completed_finished ON jobs_completed (finished_at);
CREATE INDEX jobs_failed_finished ON jobs_failed (finished_at);
CREATE INDEX jobs_cancelled_finished ON jobs_cancelled (finished_at);

-- Idempotency keys. A unique index on a table partitioned by status cannot span the pending
-- and running partitions, so the keys in scope live in a table of their own: a row exists
-- exactly while its job is pending or running. Every statement that moves a keyed job into or
-- out of that scope inserts or deletes its row in the same statement, and the primary key
-- makes concurrent enqueues of one key from any number of hosts produce one job.
CREATE TABLE job_keys (
    queue  text   NOT NULL,
    key    text   NOT NULL,
    job_id bigint NOT NULL,
    PRIMARY KEY (queue, key)
);

CREATE TABLE workers (
    id          text    PRIMARY KEY,
    host        text    NOT NULL,
    pid         integer NOT NULL,
    queues      text[]  NOT NULL,
    concurrency integer NOT NULL,
    started_at  float8  NOT NULL,
    last_seen   float8  NOT NULL
);

-- Recurring jobs (seed 001's RecurringJob): one row per schedule the app declares. The job a
-- schedule inserts is one JSON object of NewJob's fields, written with sorted keys, so comparing
-- it as text tells a changed job from an unchanged one. A schedule the app no longer declares is
-- kept (its history shows) with active = false.
CREATE TABLE recurring_jobs (
    name        text    PRIMARY KEY,
    cron        text    NOT NULL,
    job         text    NOT NULL,
    active      boolean NOT NULL DEFAULT true,
    next_run_at float8,
    last_run_at float8
);

-- Raised from inside jobs_insert when a queue would pass its max_pending, so the whole
-- statement (every job of the batch) rolls back. The backend turns SQLSTATE JY001 into
-- jobyard.QueueFull, reading the queue and the limit from the DETAIL.
CREATE FUNCTION jobyard_queue_full(queue text, max_pending integer) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'queue % is full: max_pending=% jobs are pending', queue, max_pending
        USING ERRCODE = 'JY001',
              DETAIL = json_build_object('queue', queue, 'max_pending', max_pending)::text;
END
$$;
