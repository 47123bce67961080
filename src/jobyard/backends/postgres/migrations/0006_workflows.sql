-- 0006_workflows: chains and groups. A workflow step waits, in a partition of its own, for the
-- jobs of its batch it was inserted after; the completion of the last of them moves it to
-- pending (jobs_ack, in the same statement as the completion).
--
-- The links are stored both ways on the rows, as arrays of ids written once by
-- jobs_insert_workflow (a plain batch still goes through jobs_insert, which writes none):
-- depends_on on the step (its inputs, in order), dependents on each input. The inputs not yet
-- completed are counted in waits, a column of its own: a completion decrements the counter and
-- never writes the list, so a join on 10,000 members costs each member's completion the same
-- as a join on one. (A large depends_on is stored out of line, and an update that leaves a
-- TOASTed value unchanged keeps a pointer to it rather than copying it.) waits is in no
-- index, so a decrement can be a HOT update. Plain jobs leave all four columns NULL.

ALTER TABLE jobs
    ADD COLUMN workflow_id text,
    ADD COLUMN depends_on  bigint[],
    ADD COLUMN dependents  bigint[],
    ADD COLUMN waits       integer;

-- Waiting steps churn like pending jobs (each release moves a row out, each decrement of a
-- join leaves a dead version), and are vacuumed with the hot partitions by store_tidy.
CREATE TABLE jobs_waiting PARTITION OF jobs FOR VALUES IN ('waiting')
    WITH (autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 2000,
          autovacuum_vacuum_insert_scale_factor = 0.0,
          autovacuum_vacuum_insert_threshold = 20000, autovacuum_vacuum_cost_delay = 0);

-- Listing a workflow's jobs, newest first (jobs_list_workflow): an index range in id order on
-- each partition. Partial: plain jobs are never written to it.
CREATE INDEX jobs_workflow ON jobs (workflow_id, id) WHERE workflow_id IS NOT NULL;

-- Waiting jobs can be many (every later step of every chain), so they are counted like the
-- finished ones, in job_counts (0004_counts.sql): jobs_insert_workflow adds the steps it
-- parks, and the moves out of waiting (a release in jobs_ack, jobs_cancel) take them off, each
-- in its own statement.

-- The release of workflow steps, called by jobs_ack inside its own statement (so in the same
-- transaction as the completions) with one entry in `inputs` per completed input of a step:
-- each step's counter goes down by its number of entries in one UPDATE, and a step that
-- reaches 0 moves to pending (due no earlier than its own run_at), is taken off the waiting
-- count and wakes its queue's workers. Exactly once: completions of one step's inputs on other
-- connections queue on its row lock, and READ COMMITTED re-reads the row they waited for, so
-- one UPDATE alone brings the counter to 0. A step that is not waiting any more (cancelled) is
-- left alone; one that moved to another partition while this waited for its lock fails the
-- statement with a serialization error, and the backend runs the whole ack again. Steps are
-- locked in id order: the ids go in as an ordered array (a primary-key probe each, whatever
-- the planner guesses) and are joined to their counts without a nested loop, which the
-- planner picks for an array it guesses at 10 entries and which made the release of a step's
-- N dependents (a chain into a group) cost N * N comparisons: 0.37 s for 2,000, 70 ms for
-- 10,000 without. A function, so that an ack of plain jobs never initialises this UPDATE;
-- PL/pgSQL keeps its plan for the session. Returns the number of steps released.
CREATE FUNCTION jobyard_release(inputs bigint[], at_time float8) RETURNS integer
LANGUAGE plpgsql
SET enable_nestloop = off
AS $$
DECLARE
    released integer;
BEGIN
    WITH completions AS (
        SELECT c.id, count(*)::integer AS k
        FROM unnest(inputs) AS c (id)
        GROUP BY c.id
        ORDER BY c.id
    ),
    moved AS (
        UPDATE jobs AS j
        SET waits = j.waits - c.k,
            status = CASE WHEN j.waits > c.k THEN 'waiting' ELSE 'pending' END,
            run_at = CASE WHEN j.waits > c.k THEN j.run_at ELSE greatest(j.run_at, at_time) END
        FROM completions AS c
        WHERE j.status = 'waiting'
          AND j.id = ANY(ARRAY(SELECT w.id FROM completions AS w ORDER BY w.id))
          AND j.id = c.id
        RETURNING j.queue, j.status
    ),
    counted AS (
        INSERT INTO job_counts AS jc (queue, status, n)
        SELECT m.queue, 'waiting', -count(*)
        FROM moved AS m
        WHERE m.status = 'pending'
        GROUP BY m.queue
        ORDER BY m.queue
        ON CONFLICT (queue, status) DO UPDATE SET n = jc.n + excluded.n
    ),
    notified AS (
        SELECT pg_notify('jobyard', current_schema() || ':' || d.queue) AS sent
        FROM (SELECT DISTINCT m.queue FROM moved AS m WHERE m.status = 'pending') AS d
    )
    SELECT count(*) INTO released
    FROM moved AS m
    WHERE m.status = 'pending' AND (SELECT count(*) FROM notified) >= 0;
    RETURN released;
END
$$;
