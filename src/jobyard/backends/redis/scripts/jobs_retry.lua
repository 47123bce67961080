-- jobs_retry.lua: re-drive one failed or cancelled job: pending now, attempts reset.
--
-- KEYS: the 16 keys of the job's queue (see _lib.lua); then, when ARGV[3] is "1" (a single
--       Redis node), the queue's wake list.
-- ARGV: [1] now, "" = Redis TIME   [2] job number   [3] "1" = the wake list follows
-- Touches: the job hash (status pending, attempts 0, run_at; finished_at, result, the
--          cancellation request, the progress and the dead-letter line cleared, error kept for history; its expiry
--          removed); the finished state's two indexes; the
--          ready level, prios, pending; idem (the job takes its key back).
-- Returns: {"ok", field1, value1, ...}, {"missing"} (also for a job of a batch still staged),
--          {"status", current status} when the job
--          is neither failed nor cancelled, {"corrupt", reason} when its priority is unusable,
--          or {"dup", number} when another pending or running
--          job of the queue holds its idempotency key.

local now = now_from(ARGV[1])
local n = ARGV[2]
local k = queue_keys(1)
local jk = job_key(k, n)

local cur = redis.call('HMGET', jk, 'status', 'priority', 'idempotency_key')
if not cur[1] or staged(k, n) then -- a job of a batch still staged is not there yet
  return {'missing'}
end
if cur[1] ~= 'failed' and cur[1] ~= 'cancelled' then
  return {'status', cur[1]}
end
local bad = check_number({priority = cur[2]}, 'priority', true, true, -MAX_PRIORITY - 1,
  MAX_PRIORITY)
if bad then -- it cannot be queued again; anything else corrupt fails it at its next claim
  return {'corrupt', bad}
end
local key = cur[3]
if key then
  local holder = redis.call('HGET', k.idem, key)
  if holder and holder ~= n then
    local st = redis.call('HGET', job_key(k, holder), 'status')
    if st == 'pending' or st == 'running' then
      return {'dup', holder}
    end
  end
  redis.call('HSET', k.idem, key, n)
end
from_finished(k, n, cur[1])
redis.call('PERSIST', jk)
redis.call('HDEL', jk, 'finished_at', 'result', 'token', 'lease_expires_at',
  'cancel_requested_at', 'cancelled_by', 'progress', 'progress_note', 'dead_line')
redis.call('HSET', jk, 'status', 'pending', 'attempts', 0, 'run_at', now)
to_ready(k, n, cur[2], now)
if ARGV[3] == '1' then
  wake(KEYS[NQ + 1], 1)
end
local out = {'ok'}
for _, v in ipairs(record(k, n)) do
  out[#out + 1] = v
end
return out
