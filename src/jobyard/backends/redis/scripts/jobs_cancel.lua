-- jobs_cancel.lua: cancel one pending job.
--
-- KEYS: the 13 keys of the job's queue (see _lib.lua).
-- ARGV: [1] now, "" = Redis TIME   [2] job number   [3] seconds a cancelled job is kept (0: forever)
-- Touches: the job hash (status cancelled, finished_at); its ready level, prios, pending;
--          cancelled and done:cancelled; idem (the key is free again).
-- Returns: {"ok", field1, value1, ...} (the job after the change), {"missing"}, or
--          {"status", current status} when the job is not pending.

local now = now_from(ARGV[1])
local n = ARGV[2]
local failed_ttl = tonumber(ARGV[3])
local k = queue_keys(1)
local jk = job_key(k, n)

local cur = redis.call('HMGET', jk, 'status', 'priority')
if not cur[1] then
  return {'missing'}
end
if cur[1] ~= 'pending' then
  return {'status', cur[1]}
end
from_ready(k, n, cur[2])
redis.call('HSET', jk, 'status', 'cancelled', 'finished_at', now)
to_finished(k, jk, n, 'cancelled', now, failed_ttl)
local out = {'ok'}
for _, v in ipairs(record(k, n)) do
  out[#out + 1] = v
end
return out
