-- jobs_cancel.lua: cancel one waiting or pending job, or record a cancellation request on a running one
-- (its worker reads it back from leases_renew.lua; the first request's time and author stay).
--
-- KEYS: the 16 keys of the job's queue (see _lib.lua).
-- ARGV: [1] now, "" = Redis TIME   [2] job number   [3] seconds a cancelled job is kept (0: forever)
--       [4] who asks, "" = not said   [5] "1" = pending jobs only (a running one is refused)
-- Touches: the job hash (status cancelled, finished_at, cancel_requested_at, cancelled_by); its
--          ready level, prios, pending (a waiting job: waiting, its counted inputs); cancelled and done:cancelled; idem (the key is free
--          again). A running job: only cancel_requested_at and cancelled_by of its hash.
-- Returns: {"ok", field1, value1, ...} (the job after the change), {"missing"} (also for a job of
--          a batch still staged, see _lib.lua), or
--          {"status", current status} when the job is finished (or running, with ARGV[5]).

local now = now_from(ARGV[1])
local n = ARGV[2]
local failed_ttl = tonumber(ARGV[3])
local k = queue_keys(1)
local jk = job_key(k, n)

local cur = redis.call('HMGET', jk, 'status', 'priority')
if not cur[1] or staged(k, n) then -- a job of a batch still staged is not there yet
  return {'missing'}
end
local by = ARGV[4]
if cur[1] == 'running' and ARGV[5] ~= '1' then
  if redis.call('HEXISTS', jk, 'cancel_requested_at') == 0 then
    redis.call('HSET', jk, 'cancel_requested_at', now)
    if by ~= '' then
      redis.call('HSET', jk, 'cancelled_by', by)
    end
  end
elseif cur[1] ~= 'pending' and cur[1] ~= 'waiting' then
  return {'status', cur[1]}
else
  if cur[1] == 'waiting' then
    from_waiting(k, jk, n)
  else
    from_ready(k, n, cur[2])
  end
  redis.call('HSET', jk, 'status', 'cancelled', 'finished_at', now, 'cancel_requested_at', now)
  if by ~= '' then
    redis.call('HSET', jk, 'cancelled_by', by)
  else
    redis.call('HDEL', jk, 'cancelled_by')
  end
  to_finished(k, jk, n, 'cancelled', now, failed_ttl)
end
local out = {'ok'}
for _, v in ipairs(record(k, n)) do
  out[#out + 1] = v
end
return out
