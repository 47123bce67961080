-- wake.lua: on Redis Cluster, wake workers waiting on queues after jobs became due there (on a
-- single node the insert, retry and reap scripts push these tokens themselves).
--
-- KEYS: one wake list per queue (all on the "{prefix}" tag, so one BLPOP can wait on several)
-- ARGV: one token count per key
-- Touches: LPUSH and LTRIM on each wake list.
-- Returns: "OK".

for i, key in ipairs(KEYS) do
  wake(key, tonumber(ARGV[i]))
end
return 'OK'
