-- 0008_workflow_holds: a completed job is kept while a workflow step still needs its result.
--
-- holds counts a job's dependents (its job_links as input) that have not completed and still
-- exist. jobs_insert sets it to the job's fanout; a dependent's completion (jobs_ack) and the
-- deletion of a dependent that had not completed (jobs_purge) count it down, in their own
-- write transaction. A completed job with holds > 0 is held: a purge (the workers' retention
-- too) keeps it. A step that failed or was cancelled still holds its inputs, since
-- `jobyard retry` reads them again.
ALTER TABLE jobs ADD COLUMN holds INTEGER NOT NULL DEFAULT 0;

-- Workflows already stored: each input held by its dependents that have not completed.
UPDATE jobs
SET holds = (
    SELECT count(*) FROM job_links AS l JOIN jobs AS d ON d.id = l.job_id
    WHERE l.input_id = jobs.id AND d.status <> 'completed'
)
WHERE fanout > 0;

-- The held completed jobs, by queue and finish time: what a purge counts as kept. Partial, so a
-- plain job never enters it and an acknowledgement of one writes nothing here.
CREATE INDEX jobs_held ON jobs (queue, finished_at) WHERE status = 'completed' AND holds > 0;
