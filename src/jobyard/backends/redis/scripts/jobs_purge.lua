-- jobs_purge.lua: delete finished jobs that finished at or before a cutoff, but the completed
-- jobs a workflow step still needs, and with them the waiting steps that can never run now.
--
-- KEYS: the 16 keys of each queue group (see _base.lua).
-- ARGV: [1] now, "" = Redis TIME   [2] number of groups   [3] older_than seconds
--       [4] at most this many deletions per call, waiting steps aside (the caller repeats while
--       a call reports more)   [5] seconds a completed job is kept unless its queue's config
--       sets a retention (0: forever; the TTL of an input this frees)   [6] the key prefix
--       [7] "1" = a single node: reach every queue (keys_at)   [8] JSON array of job numbers
--       per group ([[n, ...], ...]): only those jobs (the dead letter's bulk purge, a batch at a
--       time; an input this frees is deleted only if it is among them), "" = every job
--       [9..] finished states to purge (completed, failed, cancelled)
-- Touches: the deleted job hashes and their entries in each state's two indexes and in their
--          workflow's index (workflows, wf:<id>); per _flows.lua the waiting steps downstream
--          of a deleted job (hash, waiting, workflow index) and the inputs it held (holds,
--          held, done:completed, TTL); Cluster: owed entries for jobs of other queues. Reads
--          held (ZCOUNT) and each queue's config (retention).
-- Returns: {deleted, of which waiting steps, completed jobs kept (held), 1 if the limit was
--          reached (call again), then notes {"owed", group, field, ids} (Cluster, _flows.lua)}.
--          The completed jobs this call freed are deleted in it too when they match.

local now = now_from(ARGV[1])
local ng = tonumber(ARGV[2])
local cutoff = now - tonumber(ARGV[3])
local left = tonumber(ARGV[4])
local ctx = new_ctx(now, tonumber(ARGV[5]), ARGV[7] == '1', ARGV[6])
local only = ARGV[8] ~= '' and cjson.decode(ARGV[8]) or nil
local statuses = {}
for i = 9, #ARGV do
  statuses[#statuses + 1] = ARGV[i]
end
local deleted = 0

local function walk(g, k, st, has_wf)
  if left <= 0 then
    return
  end
  ctx.g = g
  local old
  if only then
    old = {}
    for _, n in ipairs(only[g]) do
      local at = tonumber(redis.call('ZSCORE', k['done_' .. st], n))
      if at and at <= cutoff and #old < left then
        old[#old + 1] = n
      end
    end
  else
    old = redis.call('ZRANGEBYSCORE', k['done_' .. st], '-inf', cutoff, 'LIMIT', 0, left)
  end
  for _, n in ipairs(old) do
    if has_wf then
      drop_linked(ctx, k, n, st, true)
    else
      drop_job(k, n, st, false)
    end
  end
  deleted = deleted + #old
  left = left - #old
end

local purges_completed = false
for g = 1, ng do
  local k = queue_keys(g)
  local has_wf = redis.call('EXISTS', k.workflows) == 1
  for _, st in ipairs(statuses) do
    walk(g, k, st, has_wf)
    purges_completed = purges_completed or st == 'completed'
  end
end
-- A second look at the queues where a deletion freed completed jobs held until now.
local kept = 0
if purges_completed then
  for g = 1, ng do
    local k = queue_keys(g)
    if ctx.freed[k.base] then
      walk(g, k, 'completed', true)
    end
    if only then
      for _, n in ipairs(only[g]) do
        local at = tonumber(redis.call('ZSCORE', k.held, n))
        if at and at <= cutoff then
          kept = kept + 1
        end
      end
    else
      kept = kept + redis.call('ZCOUNT', k.held, '-inf', cutoff)
    end
  end
end
local out = {deleted + ctx.waiting, ctx.waiting, kept, left <= 0 and 1 or 0}
for _, note in ipairs(ctx.notes) do
  out[#out + 1] = note
end
return out
