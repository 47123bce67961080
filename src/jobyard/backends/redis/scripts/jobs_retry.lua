-- jobs_retry.lua: re-drive one failed or cancelled job: pending now, attempts reset.
--
-- KEYS: the 16 keys of the job's queue (see _base.lua); then, when ARGV[3] is "1" (a single
--       Redis node), the queue's wake list.
-- ARGV: [1] now, "" = Redis TIME   [2] job number   [3] "1" = the wake list follows
-- Touches (redrive in _lib.lua): the job hash (status pending, attempts 0, run_at;
--          finished_at, result, the cancellation request, the progress and the dead-letter
--          line cleared, error kept for history; its expiry removed); the finished state's
--          two indexes; the ready level, prios, pending; idem (the job takes its key back).
-- Returns: {"ok", field1, value1, ...}, or redrive's refusal: {"missing"} (also for a job of
--          a batch still staged), {"status", current status} when the job is neither failed
--          nor cancelled, {"corrupt", reason} when its priority is unusable, or {"dup",
--          number} when another pending or running job of the queue holds its idempotency key.

local now = now_from(ARGV[1])
local n = ARGV[2]
local k = queue_keys(1)

local refused = redrive(k, n, now)
if refused then
  return refused
end
if ARGV[3] == '1' then
  wake(KEYS[NQ + 1], 1)
end
local out = {'ok'}
for _, v in ipairs(record(k, n)) do
  out[#out + 1] = v
end
return out
