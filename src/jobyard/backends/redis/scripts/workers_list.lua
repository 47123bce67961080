-- workers_list.lua: the live workers; those gone silent are forgotten on the way (a killed
-- worker cannot unregister, and no other worker may be left to forget it).
--
-- KEYS: [1] workers zset (id -> the time it counts as gone)   [2] workers info hash (id -> JSON)
-- ARGV: [1] now, "" = Redis TIME
-- Touches: both keys (only to forget).
-- Returns: 3 strings per worker: id, the time it counts as gone, JSON.

local now = now_from(ARGV[1])
local silent = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. fmt(now))
for _, id in ipairs(silent) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', KEYS[2], id)
end
local out = {}
local rows = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #rows, 2 do
  local info = redis.call('HGET', KEYS[2], rows[i])
  if info then
    out[#out + 1] = rows[i]
    out[#out + 1] = rows[i + 1]
    out[#out + 1] = info
  end
end
return out
