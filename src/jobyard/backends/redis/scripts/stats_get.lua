-- stats_get.lua: counts by state for one or more queues.
--
-- KEYS: the 16 keys of each queue group (see _base.lua).
-- ARGV: [1] now, "" = Redis TIME   [2] number of groups
-- Touches: nothing (ZCARD and ZCOUNT on the state indexes and held; the jobs of batches still
--          staged are left out of the waiting and pending counts: see "Staged batches" in
--          _lib.lua).
--          The first due pending job in claim order of each priority level (the head of its
--          line, base.QueueStats): a plain queue's the head of each ready level listed in prios
--          (ZRANGE 0 0: its earliest run_at); a fair queue's the first entry of the level's
--          turns (its lowest round, enqueue order) or, if earlier, the first due job not given
--          its turn yet (unturned: the next claim gives it one). A few entries per level,
--          never a walk of the pending jobs.
-- Returns: 9 values per group: waiting, pending, running, completed, failed, cancelled, completed in
--          the last 60 seconds, 1 if the queue has a configuration, and the earliest run_at of
--          its levels' heads as a string ("" if none is due).

local now = now_from(ARGV[1])
local ng = tonumber(ARGV[2])
-- Entries of a fair level's turns or unturned read at most: one whose job is no longer pending
-- (a stale entry, which the next claim drops) or still staged (hidden) is passed over.
local LOOK = 16

-- The run_at of the first pending, visible, due job of members `ms` (in line order), and
-- whether all of them were passed over.
local function first_due(k, ms)
  for _, m in ipairs(ms) do
    local n = unpad(m)
    local f = redis.call('HMGET', job_key(k, n), 'status', 'run_at')
    local at = tonumber(f[2])
    if f[1] == 'pending' and at and at <= now and not staged(k, n) then
      return at, false
    end
  end
  return nil, #ms == LOOK
end

-- The head of a fair queue's level p: see the header. When every entry looked at was passed
-- over, the level's earliest due job stands in for it (never a level reported empty that is not).
local function fair_head(k, p)
  local at, lost = first_due(k, redis.call('ZRANGE', turns_key(k, p), 0, LOOK - 1))
  local late, lost_late = first_due(k, redis.call(
    'ZRANGEBYSCORE', unturned_key(k, p), '-inf', now, 'LIMIT', 0, LOOK))
  if late and (at == nil or late < at) then
    at = late
  end
  if at == nil and (lost or lost_late) then
    local head = redis.call('ZRANGE', k.base .. 'ready:' .. p, 0, 0, 'WITHSCORES')
    at = tonumber(head[2])
    if at and at > now then
      at = nil
    end
  end
  return at
end
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
  local function seen(at)
    if at and at <= now and (oldest == nil or at < oldest) then
      oldest = at
    end
  end
  if redis.call('HGET', k.config, 'fair') == '1' then
    -- a level's segments ("<p>@<b>", score p) share its turns: one head per priority
    local levels = {}
    local prios = redis.call('ZRANGE', k.prios, 0, -1, 'WITHSCORES')
    for i = 2, #prios, 2 do
      local p = int(tonumber(prios[i]))
      if not levels[p] then
        levels[p] = true
        seen(fair_head(k, p))
      end
    end
  else
    for _, p in ipairs(redis.call('ZRANGE', k.prios, 0, -1)) do
      local head = redis.call('ZRANGE', k.base .. 'ready:' .. p, 0, 0, 'WITHSCORES')
      seen(tonumber(head[2]))
    end
  end
  out[#out + 1] = oldest and fmt(oldest) or ''
end
return out
