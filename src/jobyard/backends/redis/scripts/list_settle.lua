-- list_settle.lua: a list consumer settles one entry it took.
--
-- KEYS: [1] the list   [2] its processing list   [3] its recovery set   [4] its dead list
--       [5] its delivery counts   [6] its dead list's reasons (see _lists.lua)
-- ARGV: [1] the entry   [2] what to do: "ack" (remove it), "requeue" (back onto the list, at
--       the far end, behind what is queued, so an entry that keeps failing cannot hog the
--       consumers; with a cap reached, onto the dead list instead), "drop" (onto the dead
--       list), "hold" (leave it taken, dated so that the watchdog returns it later)
--       [3] "right" or "left": the end entries are popped from   [4] for "hold": the score (ms)
--       to date the entry with   [5] max_deliveries, "" = none   [6] why (the handler's error
--       or drop reason), kept as a dead entry's reason   [7] "1" = a simple list (the entry was
--       popped: no processing list, no recovery set)
-- Touches: LREM processing, ZREM/ZADD recovery set, LPUSH/RPUSH list, RPUSH dead list, HSET
--          reasons, HINCRBY/HDEL delivery counts.
-- Returns: 1 if the entry was still on the processing list (a simple list: always), 0 if the
--          watchdog had returned it to the list already (it will be delivered again:
--          at-least-once); for "requeue", 2 if it went to the dead list, past its cap.

local e = ARGV[1]
local action = ARGV[2]
local simple = ARGV[7] == '1'
if action == 'hold' then
  if redis.call('LPOS', KEYS[2], e) then
    redis.call('ZADD', KEYS[3], ARGV[4], e)
    return 1
  end
  return 0
end
local removed = 1
if not simple then
  -- The processing list's oldest entries are at its right end.
  removed = redis.call('LREM', KEYS[2], -1, e)
  if not redis.call('LPOS', KEYS[2], e) then
    redis.call('ZREM', KEYS[3], e) -- keep the record while an identical entry is still taken
  end
end
if removed > 0 then
  if action == 'requeue' then
    if past_cap(KEYS[5], KEYS[4], KEYS[6], e, ARGV[5], ARGV[6]) then
      return 2
    end
    if ARGV[3] == 'left' then
      redis.call('RPUSH', KEYS[1], e)
    else
      redis.call('LPUSH', KEYS[1], e)
    end
  else
    if ARGV[5] ~= '' then
      redis.call('HDEL', KEYS[5], e) -- settled for good: its count is forgotten
    end
    if action == 'drop' then
      redis.call('RPUSH', KEYS[4], e)
      redis.call('HSET', KEYS[6], e, ARGV[6])
    end
  end
end
return removed
