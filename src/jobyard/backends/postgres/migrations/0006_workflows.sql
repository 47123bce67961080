-- 0006_workflows: chains and groups. A workflow step waits, in a partition of its own, for the
-- jobs of its batch it was inserted after; the completion of the last of them moves it to
-- pending (jobs_ack, in the same statement as the completion).
--
-- The links are stored both ways on the rows, as arrays of ids written once by jobs_insert:
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
-- finished ones, in job_counts (0004_counts.sql): jobs_insert adds the steps it parks, and the
-- moves out of waiting (a release in jobs_ack, jobs_cancel) take them off, each in its own
-- statement.
