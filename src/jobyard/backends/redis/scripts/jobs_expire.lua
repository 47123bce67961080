-- jobs_expire.lua: the store's own retention. Drop finished jobs past the time they are kept
-- (their hashes expired already; their index entries go here), and the pending jobs of a queue
-- fed with a time to live that lapsed.
--
-- KEYS: the 16 keys of each queue group (see _lib.lua).
-- ARGV: [1] now, "" = Redis TIME   [2] number of groups
--       [3] seconds a completed job is kept (0: forever) unless its queue's config sets a
--       retention   [4] seconds a failed or cancelled job
--       is kept (0: forever)   [5] at most this many jobs per group and state per call (a
--       backlog is caught up over a few calls)
-- Touches: per group the finished jobs past retention (hash, both index entries, workflow
--          index entries); a lapsed
--          queue's pending jobs, ready levels, prios, idem entries and ttl. Reads each queue's
--          config (retention).
-- Returns: the number of jobs dropped.

local now = now_from(ARGV[1])
local ng = tonumber(ARGV[2])
local result_ttl = tonumber(ARGV[3])
local failed_ttl = tonumber(ARGV[4])
local limit = tonumber(ARGV[5])

local function prune(k, status, ttl, has_wf)
  if ttl <= 0 then
    return 0
  end
  local old = redis.call('ZRANGEBYSCORE', k['done_' .. status], '-inf', now - ttl, 'LIMIT', 0, limit)
  for _, n in ipairs(old) do
    drop_job(k, n, status, has_wf)
  end
  return #old
end

local dropped = 0
for g = 1, ng do
  local k = queue_keys(g)
  local has_wf = redis.call('EXISTS', k.workflows) == 1
  dropped = dropped + lapse_if_due(k)
  dropped = dropped + prune(k, 'completed', retention_of(k, result_ttl), has_wf)
  dropped = dropped + prune(k, 'failed', failed_ttl, has_wf)
  dropped = dropped + prune(k, 'cancelled', failed_ttl, has_wf)
end
return dropped
