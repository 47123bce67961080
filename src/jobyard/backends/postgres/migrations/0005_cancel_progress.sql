-- 0005_cancel_progress: a cancellation asked of a job (when, by whom) and a running job's
-- progress.
--
-- cancel_requested_at is set by jobs_cancel: with the cancellation itself on a pending job, as a
-- request on a running one (its worker reads it back from leases_renew). progress and
-- progress_note are written by leases_renew, fenced by the claim's token; none of the four is
-- in an index, so a renewal stays a HOT update. jobs_retry clears all four.

ALTER TABLE jobs
    ADD COLUMN cancel_requested_at float8,
    ADD COLUMN cancelled_by        text,
    ADD COLUMN progress            float8,
    ADD COLUMN progress_note       text;
