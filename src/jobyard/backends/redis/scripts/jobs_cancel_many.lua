-- jobs_cancel_many.lua: jobs_cancel.lua for many jobs of one or more queues in one call
-- (app.cancel_workflow, app.cancel_pending); the jobs it would refuse (finished, running with
-- ARGV[5], unknown or still staged) are skipped.
--
-- KEYS: the 16 keys of each queue group (see _base.lua).
-- ARGV: [1] now, "" = Redis TIME   [2] number of groups   [3] seconds a cancelled job is kept
--       (0: forever)   [4] who asks, "" = not said   [5] "1" = pending jobs only   then, per
--       group, its job numbers, comma separated
-- Touches: per job what jobs_cancel.lua touches (cancel_job in _lib.lua).
-- Returns: {group, number, group, number, ...}: the jobs changed (cancelled, or a request
--          recorded on a running one), in the order given.

local now = now_from(ARGV[1])
local ng = tonumber(ARGV[2])
local failed_ttl = tonumber(ARGV[3])
local by = ARGV[4]
local pending_only = ARGV[5] == '1'
local out = {}
for g = 1, ng do
  local k = queue_keys(g)
  for _, n in ipairs(split_ids(ARGV[5 + g])) do
    if not cancel_job(k, n, now, failed_ttl, by, pending_only) then
      out[#out + 1] = g
      out[#out + 1] = n
    end
  end
end
return out
