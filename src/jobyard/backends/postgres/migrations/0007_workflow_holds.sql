-- 0007_workflow_holds: a completed job is kept while a workflow step still needs its result.
--
-- holds counts a job's dependents that have not completed and still exist: jobs_insert_workflow
-- sets it to cardinality(dependents); a dependent's completion (jobs_ack, through
-- jobyard_unhold) and the deletion of a dependent that had not completed (jobs_purge) count it
-- down, each in its own statement. A completed job with holds > 0 is held: jobs_purge (and so
-- the workers' retention) keeps it. A step that failed or was cancelled still holds its inputs,
-- since `jobyard retry` reads them again. NULL for a plain job, which nothing ever holds. holds
-- is in no index but jobs_completed_held's predicate, so a decrement of a job that is not
-- completed yet stays a HOT update.
ALTER TABLE jobs ADD COLUMN holds integer;

-- Workflows already stored: each input held by its dependents that have not completed.
UPDATE jobs AS j
SET holds = (
    SELECT count(*) FROM jobs AS d WHERE d.id = ANY(j.dependents) AND d.status <> 'completed'
)
WHERE j.dependents IS NOT NULL;

-- The held completed jobs by finish time: what a purge counts as kept. Partial: a plain
-- completion never writes to it (built by a scan of the completed partition, once).
CREATE INDEX jobs_completed_held ON jobs_completed (queue, finished_at) WHERE holds > 0;

-- The completion of workflow steps, called by jobs_ack inside its own statement with one entry
-- in `inputs` per input of a completed step: each input loses that many holds, in one UPDATE,
-- the rows locked in id order (as jobyard_release, for the same reasons: a primary-key probe
-- each, and no nested loop over an array the planner guesses at 10 entries). The inputs of a
-- step that ran are all completed. A function, so that an ack of plain jobs never initialises
-- this UPDATE. Returns the number of inputs it freed.
CREATE FUNCTION jobyard_unhold(inputs bigint[]) RETURNS integer
LANGUAGE plpgsql
SET enable_nestloop = off
AS $$
DECLARE
    freed integer;
BEGIN
    WITH losses AS (
        SELECT c.id, count(*)::integer AS k
        FROM unnest(inputs) AS c (id)
        GROUP BY c.id
        ORDER BY c.id
    ),
    moved AS (
        UPDATE jobs AS j
        SET holds = j.holds - c.k
        FROM losses AS c
        WHERE j.id = ANY(ARRAY(SELECT w.id FROM losses AS w ORDER BY w.id))
          AND j.id = c.id
          AND j.holds IS NOT NULL
        RETURNING j.holds
    )
    SELECT count(*) INTO freed FROM moved AS m WHERE m.holds <= 0;
    RETURN freed;
END
$$;
