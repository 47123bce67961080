-- jobs_cancel.lua: cancel one waiting or pending job, or record a cancellation request on a running one
-- (its worker reads it back from leases_renew.lua; the first request's time and author stay).
--
-- KEYS: the 16 keys of the job's queue (see _base.lua).
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
local k = queue_keys(1)
local refused = cancel_job(k, n, now, tonumber(ARGV[3]), ARGV[4], ARGV[5] == '1')
if refused == 'missing' then
  return {'missing'}
elseif refused then
  return {'status', refused}
end
local out = {'ok'}
for _, v in ipairs(record(k, n)) do
  out[#out + 1] = v
end
return out
