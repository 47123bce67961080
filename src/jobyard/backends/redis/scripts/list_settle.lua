-- list_settle.lua: a reliable list consumer settles one entry it took.
--
-- KEYS: [1] the list   [2] its processing list   [3] its recovery set   [4] its dead list
-- ARGV: [1] the entry   [2] what to do: "ack" (remove it), "requeue" (back onto the list, at
--       the far end, behind what is queued, so an entry that keeps failing cannot hog the
--       consumers), "drop" (onto the dead list), "hold" (leave it taken, dated so that the
--       watchdog returns it later)   [3] "right" or "left": the end entries are popped from
--       [4] for "hold": the score (ms) to date the entry with
-- Touches: LREM processing, ZREM/ZADD recovery set, LPUSH/RPUSH list, RPUSH dead list.
-- Returns: 1 if the entry was still on the processing list, 0 if the watchdog had returned it
--          to the list already (it will be delivered again: at-least-once).

local e = ARGV[1]
local action = ARGV[2]
if action == 'hold' then
  if redis.call('LPOS', KEYS[2], e) then
    redis.call('ZADD', KEYS[3], ARGV[4], e)
    return 1
  end
  return 0
end
-- The processing list's oldest entries are at its right end.
local removed = redis.call('LREM', KEYS[2], -1, e)
if not redis.call('LPOS', KEYS[2], e) then
  redis.call('ZREM', KEYS[3], e) -- keep the record while an identical entry is still taken
end
if removed > 0 then
  if action == 'requeue' then
    if ARGV[3] == 'left' then
      redis.call('RPUSH', KEYS[1], e)
    else
      redis.call('LPUSH', KEYS[1], e)
    end
  elseif action == 'drop' then
    redis.call('RPUSH', KEYS[4], e)
  end
end
return removed
