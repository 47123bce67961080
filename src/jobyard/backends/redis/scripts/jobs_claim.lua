-- jobs_claim.lua: claim up to a limit of due jobs from one or more queues (or only peek at them).
--
-- KEYS: the 16 keys of each queue group (see _lib.lua).
-- ARGV: [1] now, "" = Redis TIME   [2] number of groups   [3] limit   [4] worker id
--       [5] token prefix (random, fresh per call; the token is "<prefix>.<number>")
--       [6] "1" = peek: report the candidates, claim nothing
--       [7] seconds a failed job is kept (0: forever): a corrupt record fails instead
-- Touches: per group the ready levels (and their segments, see jobs_publish.lua), prios, pending
--          and claims sets and the claimed job hashes
--          (status running, attempts + 1, started_at, worker_id, token, lease_expires_at);
--          a due job whose record is corrupt (see fault() in _lib.lua) is failed with the
--          reason instead, and the others of the batch are claimed as usual.
-- Returns: claim: 13 strings per job: group, number, name, payload, attempts, max_attempts,
--          backoff, timeout, lease, token, delivery, parent_id ("" for none), run_at.
--          peek: 4 strings per candidate: group, priority, run_at, number.
--
-- Order: priority DESC, run_at ASC, enqueue order ASC, across every group. Paused queues give
-- nothing; a queue with max_concurrency m and r running jobs gives at most m - r.

local now = now_from(ARGV[1])
local ng = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local worker = ARGV[4]
local prefix = ARGV[5]
local peek = ARGV[6] == '1'
local failed_ttl = tonumber(ARGV[7]) or 0

-- Claim order: priority DESC, run_at ASC, enqueue order ASC.
local function better(a, b)
  if a.prio ~= b.prio then
    return a.prio > b.prio
  end
  if a.run_at ~= b.run_at then
    return a.run_at < b.run_at
  end
  return a.member < b.member -- zero-padded numbers: string order is enqueue order
end

local candidates = {}
local groups = {}
for g = 1, ng do
  local k = queue_keys(g)
  groups[g] = k
  local lapsed = lapse_if_due(k) -- -1: lapsed with workflow jobs, left to jobs_expire
  local conf = redis.call('HMGET', k.config, 'paused', 'max_concurrency')
  local cap = limit
  if conf[2] then
    cap = math.min(cap, tonumber(conf[2]) - redis.call('ZCARD', k.claims))
  end
  if conf[1] ~= '1' and cap > 0 and lapsed >= 0 then
    -- Levels from the highest priority down: a lower level can only fill what is left. A
    -- level may have segments beside it (a published batch's entries being merged into it,
    -- see jobs_publish.lua), members "<p>@<batch>" of prios with the same score: each of the
    -- keys of one priority may hold the best entries, so each is asked for what the higher
    -- priorities left, and the queue's share is cut to its cap once they are sorted.
    local got, before, prio_of_band = 0, 0, nil
    local mine = {}
    local levels = redis.call('ZREVRANGE', k.prios, 0, -1, 'WITHSCORES')
    for i = 1, #levels, 2 do
      local p, prio = levels[i], tonumber(levels[i + 1])
      if prio ~= prio_of_band then
        if got >= cap then
          break
        end
        prio_of_band, before = prio, got
      end
      local level = k.base .. 'ready:' .. p
      local due = redis.call('ZRANGEBYSCORE', level, '-inf', now, 'WITHSCORES', 'LIMIT', 0,
        cap - before)
      if #due == 0 and redis.call('EXISTS', level) == 0 then
        redis.call('ZREM', k.prios, p) -- an emptied level
      end
      for j = 1, #due, 2 do
        mine[#mine + 1] = {
          g = g, prio = prio, p = p, run_at = tonumber(due[j + 1]), member = due[j],
        }
      end
      got = got + #due / 2
    end
    if #mine > cap then -- only with segments: keys of one priority each gave up to the cap
      table.sort(mine, better)
    end
    for j = 1, math.min(cap, #mine) do
      candidates[#candidates + 1] = mine[j]
    end
  end
end

table.sort(candidates, better)

local out = {}
local chosen = math.min(limit, #candidates)
if peek then
  for i = 1, chosen do
    local c = candidates[i]
    out[#out + 1] = tostring(c.g)
    out[#out + 1] = int(c.prio)
    out[#out + 1] = fmt(c.run_at)
    out[#out + 1] = unpad(c.member)
  end
  return out
end

-- Every chosen entry leaves its ready level and pending at once (what from_ready does, one call
-- per set), a stale one (its job no longer pending) too; a level left empty leaves prios.
local drop, levels = new_batch(), {}
for i = 1, chosen do
  local c = candidates[i]
  local k = groups[c.g]
  local level = k.base .. 'ready:' .. c.p
  c.n = unpad(c.member)
  batch_add(drop, 'ZREM', level, c.member)
  batch_add(drop, 'ZREM', k.pending, c.n)
  levels[level] = {k.prios, c.p}
end
batch_send(drop)
for level, at in pairs(levels) do
  if redis.call('EXISTS', level) == 0 then
    redis.call('ZREM', at[1], at[2])
  end
end

-- One read per job serves both the check for a corrupt record (fault_of) and the reply.
local READ = {'backoff', 'parent_id'}
for i, f in ipairs(FIELDS) do
  READ[2 + i] = f
end
local claims = new_batch()
for i = 1, chosen do
  local c = candidates[i]
  local k, n = groups[c.g], c.n
  local jk = job_key(k, n)
  local f = read_fields(jk, READ)
  local bad = fault_of(f)
  if f.status == 'pending' and bad then
    fail_corrupt(k, jk, n, now, bad, failed_ttl)
  elseif f.status == 'pending' then -- anything else is a stale index entry: dropped above
    local attempts = (tonumber(f.attempts) or 0) + 1
    local lease = tonumber(f.lease)
    local token = prefix .. '.' .. n
    local expires = now + lease
    redis.call('HSET', jk, 'status', 'running', 'attempts', attempts, 'started_at', now,
      'worker_id', worker, 'token', token, 'lease_expires_at', expires)
    batch_add(claims, 'ZADD', k.claims, expires, n)
    out[#out + 1] = tostring(c.g)
    out[#out + 1] = n
    out[#out + 1] = f.name
    out[#out + 1] = f.payload
    out[#out + 1] = int(attempts)
    out[#out + 1] = int(tonumber(f.max_attempts))
    out[#out + 1] = f.backoff or ''
    out[#out + 1] = f.timeout and fmt(tonumber(f.timeout)) or ''
    out[#out + 1] = fmt(lease)
    out[#out + 1] = token
    out[#out + 1] = f.delivery or 'at_least_once'
    out[#out + 1] = f.parent_id or ''
    out[#out + 1] = fmt(c.run_at)
  elseif not KNOWN_STATES[f.status or ''] and redis.call('EXISTS', jk) == 1 then
    fail_corrupt(k, jk, n, now, bad, failed_ttl) -- its status itself is missing or corrupt
  end
end
batch_send(claims)
return out
