-- 0012_dead_lines: each failed job's dead-letter line, stored when it fails.
--
-- The dead letter groups failed jobs by queue, name and base.error_line of the error's last
-- 1,000 characters. Grouping computed that line from every walked error on every read of the
-- page (a traceback each, through a Python function: 50 ms for 5,000 failed jobs); now the
-- statements that fail a job (jobs_ack_failed, leases_reap) store it beside the error, and
-- dead_groups reads this short column only. The line of a job that is not failed is left as
-- it was and never read.
ALTER TABLE jobs ADD COLUMN dead_line TEXT;

-- What the grouping reads, newest first, from the index alone: a failed job's row holds its
-- payload and traceback, and the column added last is read past both (overflow pages).
CREATE INDEX jobs_dead_lines ON jobs (status, id, queue, name, finished_at, dead_line)
WHERE status = 'failed';

-- The jobs already failed: the same function the backend registers on its connections.
UPDATE jobs
SET dead_line = jobyard_error_line(CAST(substr(error, -1000) AS BLOB))
WHERE status IN ('failed', 'cancelled') AND status = 'failed';
