-- schedules_pause.lua: pause a recurring job, or resume it from a new next run.
--
-- KEYS: [1] the schedule's hash
-- ARGV: [1] "1" pause, "0" resume   [2] the next run when a paused schedule resumes (the ticks
--       it missed while paused never fire)
-- Touches: the schedule hash (paused; next_run_at on a resume of a paused schedule).
-- Returns: 1, or 0 if there is no such schedule.

local s = redis.call('HMGET', KEYS[1], 'name', 'paused')
if not s[1] then
  return 0
end
if ARGV[1] == '1' then
  redis.call('HSET', KEYS[1], 'paused', '1')
elseif s[2] == '1' then
  redis.call('HSET', KEYS[1], 'paused', '0', 'next_run_at', ARGV[2])
end
return 1
