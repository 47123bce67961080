-- list_recover.lua: the watchdog of a reliable list (seed 003's recovery_zset and min_idle).
-- Every entry taken longer than min_idle ago belongs to no live consumer: it goes back onto the
-- list, at the end consumers pop next, where any consumer can take it; with a delivery cap, an
-- entry whose deliveries reach it goes to the dead list instead (see _lists.lua), so an entry
-- that kills every consumer taking it is not delivered forever.
--
-- KEYS: [1] the list   [2] its processing list   [3] its recovery set (entry -> ms taken)
--       [4] its dead list   [5] its delivery counts   [6] its dead list's reasons
-- ARGV: [1] now in ms, "" = Redis TIME   [2] min_idle in ms   [3] "right" or "left": the end
--       entries are popped from   [4] recovery set ttl in ms, "" = none   [5] at most this many
--       [6] max_deliveries, "" = none
-- Touches: ZRANGEBYSCORE/ZREM/ZADD recovery set, LREM processing, RPUSH/LPUSH list, PEXPIRE;
--          with a cap: HINCRBY/HDEL delivery counts, RPUSH dead list, HSET reasons.
-- Returns: {the entries returned to the list, the entries moved to the dead list}.

local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local min_idle = tonumber(ARGV[2])
local limit = tonumber(ARGV[5])
local why = 'not settled within min_idle (its consumer stopped, or was killed, holding it)'

local back, dead = {}, {}
local idle = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now - min_idle, 'LIMIT', 0, limit)
for _, e in ipairs(idle) do
  redis.call('ZREM', KEYS[3], e)
  if redis.call('LREM', KEYS[2], -1, e) > 0 then
    if past_cap(KEYS[5], KEYS[4], KEYS[6], e, ARGV[6], why) then
      dead[#dead + 1] = e
    else
      if ARGV[3] == 'left' then
        redis.call('LPUSH', KEYS[1], e)
      else
        redis.call('RPUSH', KEYS[1], e)
      end
      back[#back + 1] = e
    end
    if redis.call('LPOS', KEYS[2], e) then
      redis.call('ZADD', KEYS[3], now, e) -- an identical entry is still taken: keep a record
    end
  end
end

-- An entry on the processing list without a record was moved by a blocking BLMOVE whose
-- consumer stopped before recording it: date it now, so it comes back after min_idle too.
for _, e in ipairs(redis.call('LRANGE', KEYS[2], -limit, -1)) do
  if not redis.call('ZSCORE', KEYS[3], e) then
    redis.call('ZADD', KEYS[3], now, e)
  end
end
if ARGV[4] ~= '' then
  for _, k in ipairs({KEYS[3], KEYS[5]}) do
    if redis.call('EXISTS', k) == 1 then
      redis.call('PEXPIRE', k, ARGV[4])
    end
  end
end
return {back, dead}
