-- jobs_unhold.lua: Redis Cluster: take holds off jobs of one queue owed by their dependents in
-- other queues (other slots), which completed or were deleted before they completed (see
-- _flows.lua). Safe to send again: a hold is taken off once per (job, dependent).
--
-- KEYS: the 16 keys of the jobs' queue (see _base.lua).
-- ARGV: [1] now, "" = Redis TIME   [2] seconds a completed job is kept unless its queue's
--       config sets a retention (0: forever)   [3] JSON array of [job number, dependent id]
-- Touches: the jobs' hashes (holds) and "freed:<n>" sets; a job freed: held, done:completed,
--          its TTL. Reads the queue's config (retention).
-- Returns: how many completed jobs were freed (a purge then looks at the queue again).

local now = now_from(ARGV[1])
local k = queue_keys(1)
local ctx = new_ctx(now, tonumber(ARGV[2]), false, '')
local freed = 0
for _, pair in ipairs(cjson.decode(ARGV[3])) do
  freed = freed + unhold(ctx, k, pair[1], pair[2])
end
return freed
