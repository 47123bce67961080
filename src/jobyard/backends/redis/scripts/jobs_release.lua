-- jobs_release.lua: Redis Cluster: pay releases owed to waiting jobs of one queue by inputs
-- that completed in other queues (other slots; see jobs_ack.lua). Safe to send again: an input
-- is counted once per waiting job (its set of counted inputs), and a job no longer waiting
-- (released, cancelled) is left alone.
--
-- KEYS: the 16 keys of the waiting jobs' queue (see _base.lua).
-- ARGV: [1] now, "" = Redis TIME   [2] JSON array of [waiting job number, completed input id]
-- Touches: the waiting jobs' hashes (waits; status, run_at when released) and "inputs:<n>"
--          sets; the waiting, pending, prios and ready level sets of those released.
-- Returns: how many jobs became pending (the caller wakes the queue's workers).

local now = now_from(ARGV[1])
local k = queue_keys(1)
local released = 0
for _, pair in ipairs(cjson.decode(ARGV[2])) do
  released = released + count_input(k, pair[1], now, pair[2])
end
return released
