-- 0006_cancel_progress: a cancellation asked of a job (when, by whom) and a running job's
-- progress.
--
-- cancel_requested_at is set by jobs_cancel: with the cancellation itself on a pending job, as
-- a request on a running one (its worker reads it back from leases_renew). progress and
-- progress_note are written by leases_renew, fenced by the claim's token. jobs_retry clears
-- all four.

ALTER TABLE jobs ADD COLUMN cancel_requested_at REAL;
ALTER TABLE jobs ADD COLUMN cancelled_by TEXT;
ALTER TABLE jobs ADD COLUMN progress REAL;
ALTER TABLE jobs ADD COLUMN progress_note TEXT;
