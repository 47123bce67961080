-- 0002_schedules: recurring jobs (seed 001's RecurringJob).
--
-- The job a schedule inserts is kept as one JSON object of NewJob's fields, written by the
-- backend with sorted keys: comparing it as text is how schedules_sync tells a changed job from
-- an unchanged one.

CREATE TABLE schedules (
    name        TEXT    PRIMARY KEY,
    cron        TEXT    NOT NULL,
    job         TEXT    NOT NULL,
    active      INTEGER NOT NULL DEFAULT 1,
    next_run_at REAL,
    last_run_at REAL
) STRICT;
