-- schedules_sync.lua: store one schedule of the app, keeping its next run when nothing changed.
--
-- KEYS: [1] the schedule's hash (on its job queue's tag)
-- ARGV: [1] name   [2] cron ("" for an interval schedule)   [3] queue   [4] the job as canonical
--       JSON   [5] next_run_at for a new or changed schedule   [6] every ("" for a cron
--       schedule)   [7] timezone   [8] catch_up   [9] paused to carry over from the hash this
--       schedule had on another queue's slot ("1" or "0"), "" = none
-- Touches: the schedule hash: active 1, catch_up set; cron, every, timezone, queue, job,
--          next_run_at set and last_run_at cleared when the schedule is new or its ticks or job
--          changed. paused is kept as it is (a deploy never resumes a paused schedule).
-- Returns: 1 if the schedule was (re)started, 0 if it kept its next run.

local cur = redis.call('HMGET', KEYS[1], 'cron', 'job', 'next_run_at', 'every', 'timezone',
  'paused')
local every = cur[4] or ''
local timezone = cur[5] or 'UTC'
if cur[1] == ARGV[2] and cur[2] == ARGV[4] and cur[3] and every == ARGV[6]
    and timezone == ARGV[7] then
  redis.call('HSET', KEYS[1], 'active', '1', 'catch_up', ARGV[8])
  return 0
end
local paused = cur[6] or '0'
if ARGV[9] ~= '' then
  paused = ARGV[9]
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'name', ARGV[1], 'cron', ARGV[2], 'queue', ARGV[3], 'job', ARGV[4],
  'next_run_at', ARGV[5], 'active', '1', 'every', ARGV[6], 'timezone', ARGV[7],
  'catch_up', ARGV[8], 'paused', paused)
return 1
