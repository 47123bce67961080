-- schedules_skip.lua: drop ticks of a recurring job without firing them: the compare-and-set
-- of schedules_fire.lua without the insert.
--
-- KEYS: [1] the schedule's hash
-- ARGV: [1] fire_at (the tick the schedule must still wait for)   [2] next_at (its new next run)
-- Touches: the schedule hash (next_run_at); last_run_at stays the last tick that fired.
-- Returns: 1 if moved, 0 if the schedule is inactive, paused, or not waiting for this tick.

local s = redis.call('HMGET', KEYS[1], 'active', 'next_run_at', 'paused')
-- stores round: a tick matches within 1 ms
if s[1] ~= '1' or s[3] == '1' or not s[2]
    or math.abs(tonumber(s[2]) - tonumber(ARGV[1])) > 0.001 then
  return 0
end
redis.call('HSET', KEYS[1], 'next_run_at', ARGV[2])
return 1
