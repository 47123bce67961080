-- stats_get.lua: counts by state for one or more queues.
--
-- KEYS: the 16 keys of each queue group (see _base.lua).
-- ARGV: [1] now, "" = Redis TIME   [2] number of groups
-- Touches: nothing (ZCARD and ZCOUNT on the state indexes and held; the jobs of batches still
--          staged are left out of the waiting and pending counts: see "Staged batches" in
--          _lib.lua).
--          The oldest due pending job: the head of each ready level listed in prios (ZRANGE 0 0,
--          one entry per level), never a walk of the pending jobs.
-- Returns: 9 values per group: waiting, pending, running, completed, failed, cancelled, completed in
--          the last 60 seconds, 1 if the queue has a configuration, and the run_at of the
--          oldest due pending job as a string ("" if none is due).

local now = now_from(ARGV[1])
local ng = tonumber(ARGV[2])
local out = {}
for g = 1, ng do
  local k = queue_keys(g)
  local waiting = redis.call('ZCARD', k.waiting)
  local pending = redis.call('ZCARD', k.pending)
  if redis.call('EXISTS', k.stages) == 1 then
    for _, r in ipairs(stage_ranges(k)) do
      waiting = waiting - redis.call('ZCOUNT', k.waiting, r[1], r[2])
      pending = pending - redis.call('ZCOUNT', k.pending, r[1], r[2])
    end
  end
  out[#out + 1] = waiting
  out[#out + 1] = pending
  out[#out + 1] = redis.call('ZCARD', k.claims)
  out[#out + 1] = redis.call('ZCARD', k.completed)
  out[#out + 1] = redis.call('ZCARD', k.failed)
  out[#out + 1] = redis.call('ZCARD', k.cancelled)
  -- completed jobs a workflow step still needs are in held, scored by finish time too
  out[#out + 1] = redis.call('ZCOUNT', k.done_completed, now - 60, '+inf')
    + redis.call('ZCOUNT', k.held, now - 60, '+inf')
  out[#out + 1] = redis.call('EXISTS', k.config)
  local oldest = nil
  for _, p in ipairs(redis.call('ZRANGE', k.prios, 0, -1)) do
    local head = redis.call('ZRANGE', k.base .. 'ready:' .. p, 0, 0, 'WITHSCORES')
    local at = tonumber(head[2])
    if at and at <= now and (oldest == nil or at < oldest) then
      oldest = at
    end
  end
  out[#out + 1] = oldest and fmt(oldest) or ''
end
return out
