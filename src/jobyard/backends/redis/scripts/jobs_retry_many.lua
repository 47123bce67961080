-- jobs_retry_many.lua: jobs_retry.lua for many jobs of one or more queues in one call (the
-- dead letter's bulk retry); the jobs it would refuse (unknown or still staged, neither failed
-- nor cancelled, a corrupt priority, an idempotency key another pending or running job holds,
-- also one re-driven earlier in this call) are skipped.
--
-- KEYS: the 16 keys of each queue group (see _base.lua); then, when ARGV[2] is "1" (a single
--       Redis node), each group's wake list, in the groups' order.
-- ARGV: [1] now, "" = Redis TIME   [2] "1" = the wake lists follow   [3] number of groups
--       then, per group, its job numbers, comma separated
-- Touches: per job what jobs_retry.lua touches (redrive in _lib.lua); a wake token per job
--          re-driven into each group's wake list.
-- Returns: {group, number, group, number, ...}: the jobs re-driven, in the order given.

local now = now_from(ARGV[1])
local wakes = ARGV[2] == '1'
local ng = tonumber(ARGV[3])
local out = {}
for g = 1, ng do
  local k = queue_keys(g)
  local done = 0
  for _, n in ipairs(split_ids(ARGV[3 + g])) do
    if not redrive(k, n, now) then
      out[#out + 1] = g
      out[#out + 1] = n
      done = done + 1
    end
  end
  if wakes then
    wake(KEYS[ng * NQ + g], done)
  end
end
return out
