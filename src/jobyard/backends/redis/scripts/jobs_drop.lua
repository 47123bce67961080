-- jobs_drop.lua: Redis Cluster: delete waiting jobs of one queue whose input in another queue
-- (another slot) was deleted (a purge or an expiry, see _flows.lua): they can never run. Safe
-- to send again: a job no longer there, or no longer waiting, is left alone.
--
-- KEYS: the 16 keys of the jobs' queue (see _base.lua).
-- ARGV: [1] now, "" = Redis TIME   [2] seconds a completed job is kept unless its queue's
--       config sets a retention (0: forever)   [3] the key prefix
--       [4] JSON array of [job number, deleted input id]
-- Touches: per drop_linked in _flows.lua: the deleted jobs (hash, waiting, workflow index),
--          the waiting steps downstream of them in this queue, the holds of their inputs in
--          this queue; owed entries for the jobs of other queues.
-- Returns: {waiting jobs deleted, completed jobs of this queue freed, then notes {"owed", 1,
--          field, ids}}.

local now = now_from(ARGV[1])
local k = queue_keys(1)
local ctx = new_ctx(now, tonumber(ARGV[2]), false, ARGV[3])
local has_wf = redis.call('EXISTS', k.workflows) == 1
for _, pair in ipairs(cjson.decode(ARGV[4])) do
  local n = tostring(pair[1])
  if redis.call('HGET', job_key(k, n), 'status') == 'waiting' then
    drop_linked(ctx, k, n, 'waiting', has_wf)
  end
end
local out = {ctx.waiting, ctx.freed[k.base] and 1 or 0}
for _, note in ipairs(ctx.notes) do
  out[#out + 1] = note
end
return out
