-- workers_beat.lua: register, refresh or remove a worker; forget workers gone silent.
--
-- KEYS: [1] workers zset (id -> the time it counts as gone: last beat + its forget_after)
--       [2] workers info hash (id -> JSON, with its forget_after)
-- ARGV: [1] now, "" = Redis TIME   [2] worker id   [3] the worker's JSON   [4] "1" = stopping
--       [5] this worker's forget_after: seconds of silence after which it counts as gone
-- Touches: both keys.
-- Returns: "OK".

local now = now_from(ARGV[1])
if ARGV[4] == '1' then
  redis.call('ZREM', KEYS[1], ARGV[2])
  redis.call('HDEL', KEYS[2], ARGV[2])
else
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[5]), ARGV[2])
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
end
local silent = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. fmt(now))
for _, id in ipairs(silent) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', KEYS[2], id)
end
return 'OK'
