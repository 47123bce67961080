-- workers_beat.lua: register, refresh or remove a worker; forget workers gone silent.
--
-- KEYS: [1] workers zset (id -> last_seen)   [2] workers info hash (id -> JSON)
-- ARGV: [1] now, "" = Redis TIME   [2] worker id   [3] the worker's JSON   [4] "1" = stopping
--       [5] forget workers whose last beat is older than this many seconds
-- Touches: both keys.
-- Returns: "OK".

local now = now_from(ARGV[1])
if ARGV[4] == '1' then
  redis.call('ZREM', KEYS[1], ARGV[2])
  redis.call('HDEL', KEYS[2], ARGV[2])
else
  redis.call('ZADD', KEYS[1], now, ARGV[2])
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
end
local silent = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. fmt(now - tonumber(ARGV[5])))
for _, id in ipairs(silent) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', KEYS[2], id)
end
return 'OK'
