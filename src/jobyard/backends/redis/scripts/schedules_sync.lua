-- schedules_sync.lua: store one schedule of the app, keeping its next run when nothing changed.
--
-- KEYS: [1] the schedule's hash (on its job queue's tag)
-- ARGV: [1] name   [2] cron   [3] queue   [4] the job as canonical JSON   [5] next_run_at for a
--       new or changed schedule
-- Touches: the schedule hash: active 1; cron, queue, job, next_run_at set and last_run_at
--          cleared when the schedule is new or its cron or job changed.
-- Returns: 1 if the schedule was (re)started, 0 if it kept its next run.

local cur = redis.call('HMGET', KEYS[1], 'cron', 'job', 'next_run_at')
if cur[1] == ARGV[2] and cur[2] == ARGV[4] and cur[3] then
  redis.call('HSET', KEYS[1], 'active', '1')
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'name', ARGV[1], 'cron', ARGV[2], 'queue', ARGV[3], 'job', ARGV[4],
  'next_run_at', ARGV[5], 'active', '1')
return 1
