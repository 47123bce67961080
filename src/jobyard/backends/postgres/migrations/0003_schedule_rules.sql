-- 0003_schedule_rules: recurring jobs in a timezone or at an interval, their catch-up policy,
-- and a pause that syncing never clears.
--
-- An interval schedule (every seconds) keeps an empty cron. paused is written only by
-- schedules_pause: schedules_sync leaves it as it is, so a restart or a deploy of the app cannot
-- resume a schedule someone paused.

ALTER TABLE recurring_jobs
    ADD COLUMN every    float8,
    ADD COLUMN timezone text    NOT NULL DEFAULT 'UTC',
    ADD COLUMN catch_up text    NOT NULL DEFAULT 'latest',
    ADD COLUMN paused   boolean NOT NULL DEFAULT false;
