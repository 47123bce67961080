-- Schedules: recurring jobs (cron), synced by workers, advanced exactly once per fire.
-- (Conventions for every file here: README.md in this folder.)

-- name: schedules_sync
-- Make the stored schedules those given. An unchanged one (same ticks: cron, every, timezone;
-- same job text) keeps its stored next and last run, so a restart neither fires a tick twice nor
-- skips one; a new or changed one starts at the given next run. The others are deactivated, not
-- deleted. paused is never written here: a deploy cannot resume a paused schedule.
WITH given AS (
    SELECT *
    FROM unnest(
        %(names)b::text[], %(crons)b::text[], %(jobs)b::text[], %(next_run_ats)b::float8[],
        %(everys)b::float8[], %(timezones)b::text[], %(catch_ups)b::text[]
    ) AS g (name, cron, job, next_run_at, every, timezone, catch_up)
),
deactivated AS (
    UPDATE recurring_jobs
    SET active = false
    WHERE active AND name <> ALL(%(names)b::text[])
),
upserted AS (
    INSERT INTO recurring_jobs AS r
        (name, cron, job, active, next_run_at, last_run_at, every, timezone, catch_up)
    SELECT name, cron, job, true, next_run_at, NULL, every, timezone, catch_up FROM given
    ON CONFLICT (name) DO UPDATE
    SET active = true,
        next_run_at = CASE
            WHEN r.cron = excluded.cron AND r.job = excluded.job
                 AND r.every IS NOT DISTINCT FROM excluded.every
                 AND r.timezone = excluded.timezone
            THEN r.next_run_at
            ELSE excluded.next_run_at
        END,
        last_run_at = CASE
            WHEN r.cron = excluded.cron AND r.job = excluded.job
                 AND r.every IS NOT DISTINCT FROM excluded.every
                 AND r.timezone = excluded.timezone
            THEN r.last_run_at
        END,
        cron = excluded.cron,
        job = excluded.job,
        every = excluded.every,
        timezone = excluded.timezone,
        catch_up = excluded.catch_up
)
SELECT 1;

-- name: schedules_list
SELECT name, cron, job, active, next_run_at, last_run_at, every, timezone, catch_up, paused
FROM recurring_jobs
ORDER BY name;

-- name: schedules_advance
-- The compare-and-set of a tick (1 ms tolerance: a float may round on its way through another
-- store). The UPDATE locks the row, so a concurrent firer waits and then re-reads the moved
-- next_run_at (READ COMMITTED rechecks the updated row) and matches nothing. It runs in the
-- transaction that inserts the tick's job, so a refused insert (QueueFull) undoes it.
UPDATE recurring_jobs
SET next_run_at = %(next_at)s::float8, last_run_at = %(fire_at)s::float8
WHERE name = %(name)s::text
  AND active
  AND NOT paused
  AND next_run_at IS NOT NULL
  AND abs(next_run_at - %(fire_at)s::float8) <= 0.001
RETURNING job;

-- name: schedules_skip
-- The same compare-and-set, dropping the ticks from fire_at up to next_at: no job, and
-- last_run_at stays the last tick that fired.
UPDATE recurring_jobs
SET next_run_at = %(next_at)s::float8
WHERE name = %(name)s::text
  AND active
  AND NOT paused
  AND next_run_at IS NOT NULL
  AND abs(next_run_at - %(fire_at)s::float8) <= 0.001;

-- name: schedules_pause
-- Pause, or resume: a paused schedule that resumes starts over at next_run_at (the ticks it
-- missed while paused never fire); resuming one that is not paused changes nothing.
UPDATE recurring_jobs
SET next_run_at = CASE
        WHEN NOT %(paused)s::boolean AND paused THEN %(next_run_at)s::float8
        ELSE next_run_at
    END,
    paused = %(paused)s::boolean
WHERE name = %(name)s::text;
