-- 0004_schedule_rules: schedules in a timezone or at an interval, their catch-up policy, and
-- a pause that syncing never clears.
--
-- An interval schedule (every seconds) keeps an empty cron. paused is set only by
-- schedules_pause: schedules_upsert leaves it as it is, so a restart or a deploy of the app
-- cannot resume a schedule someone paused.

ALTER TABLE schedules ADD COLUMN every REAL;
ALTER TABLE schedules ADD COLUMN timezone TEXT NOT NULL DEFAULT 'UTC';
ALTER TABLE schedules ADD COLUMN catch_up TEXT NOT NULL DEFAULT 'latest';
ALTER TABLE schedules ADD COLUMN paused INTEGER NOT NULL DEFAULT 0;
