-- jobs_expire.lua: the store's own retention. Drop finished jobs past the time they are kept
-- (their hashes expired already, but those of failed or cancelled workflow jobs, which get no
-- TTL; their index entries go here), and the pending jobs of a queue fed with a time to live
-- that lapsed. A completed job a workflow step still needs is held (_flows.lua): it is in no
-- index walked here, and has no TTL. A failed or cancelled workflow job takes the waiting steps
-- downstream of it with it, as a purge does.
--
-- KEYS: the 16 keys of each queue group (see _base.lua).
-- ARGV: [1] now, "" = Redis TIME   [2] number of groups
--       [3] seconds a completed job is kept (0: forever) unless its queue's config sets a
--       retention   [4] seconds a failed or cancelled job
--       is kept (0: forever)   [5] at most this many jobs per group and state per call (a
--       backlog is caught up over a few calls)   [6] the key prefix   [7] "1" = a single node:
--       reach every queue (keys_at)
-- Touches: per group the finished jobs past retention (hash, both index entries, workflow
--          index entries; per _flows.lua their waiting steps and the inputs they held); a
--          lapsed queue's pending jobs, ready levels, prios, idem entries and ttl. Reads each
--          queue's config (retention). Cluster: owed entries for jobs of other queues.
-- Returns: {the number of jobs dropped (waiting steps included), then notes {"owed", group,
--          field, ids} (Cluster, see _flows.lua)}.

local now = now_from(ARGV[1])
local ng = tonumber(ARGV[2])
local result_ttl = tonumber(ARGV[3])
local failed_ttl = tonumber(ARGV[4])
local limit = tonumber(ARGV[5])
local ctx = lapse_ctx(new_ctx(now, result_ttl, ARGV[7] == '1', ARGV[6]))

local function prune(g, k, status, ttl, has_wf)
  if ttl <= 0 then
    return 0
  end
  ctx.g = g
  local old = redis.call('ZRANGEBYSCORE', k['done_' .. status], '-inf', now - ttl, 'LIMIT', 0, limit)
  for _, n in ipairs(old) do
    if has_wf then
      drop_linked(ctx, k, n, status, true)
    else
      drop_job(k, n, status, false)
    end
  end
  return #old
end

local dropped = 0
for g = 1, ng do
  local k = queue_keys(g)
  local has_wf = redis.call('EXISTS', k.workflows) == 1
  ctx.g = g
  dropped = dropped + lapse_if_due(k, ctx)
  dropped = dropped + prune(g, k, 'completed', retention_of(k, result_ttl), has_wf)
  dropped = dropped + prune(g, k, 'failed', failed_ttl, has_wf)
  dropped = dropped + prune(g, k, 'cancelled', failed_ttl, has_wf)
end
local out = {dropped + ctx.waiting}
for _, note in ipairs(ctx.notes) do
  out[#out + 1] = note
end
return out
