-- jobs_claim.lua: claim up to a limit of due jobs from one or more queues (or only peek at them).
--
-- KEYS: the 16 keys of each queue group (see _lib.lua).
-- ARGV: [1] now, "" = Redis TIME   [2] number of groups   [3] limit   [4] worker id
--       [5] token prefix (random, fresh per call; the token is "<prefix>.<number>")
--       [6] "1" = peek: report the candidates, claim nothing
--       [7] seconds a failed job is kept (0: forever): a corrupt record fails instead
-- Touches: per group the ready levels, prios, pending and claims sets and the claimed job hashes
--          (status running, attempts + 1, started_at, worker_id, token, lease_expires_at);
--          a due job whose record is corrupt (see fault() in _lib.lua) is failed with the
--          reason instead, and the others of the batch are claimed as usual.
-- Returns: claim: 12 strings per job: group, number, name, payload, attempts, max_attempts,
--          backoff, timeout, lease, token, delivery, parent_id ("" for none).
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

local candidates = {}
local groups = {}
for g = 1, ng do
  local k = queue_keys(g)
  groups[g] = k
  lapse_if_due(k)
  local conf = redis.call('HMGET', k.config, 'paused', 'max_concurrency')
  local cap = limit
  if conf[2] then
    cap = math.min(cap, tonumber(conf[2]) - redis.call('ZCARD', k.claims))
  end
  if conf[1] ~= '1' and cap > 0 then
    -- Levels from the highest priority down: a lower level can only fill what is left.
    local got = 0
    for _, p in ipairs(redis.call('ZREVRANGE', k.prios, 0, -1)) do
      local level = k.base .. 'ready:' .. p
      local due = redis.call('ZRANGEBYSCORE', level, '-inf', now, 'WITHSCORES', 'LIMIT', 0, cap - got)
      if #due == 0 and redis.call('EXISTS', level) == 0 then
        redis.call('ZREM', k.prios, p) -- an emptied level
      end
      for i = 1, #due, 2 do
        candidates[#candidates + 1] = {
          g = g, prio = tonumber(p), p = p, run_at = tonumber(due[i + 1]), member = due[i],
        }
      end
      got = got + #due / 2
      if got >= cap then
        break
      end
    end
  end
end

table.sort(candidates, function(a, b)
  if a.prio ~= b.prio then
    return a.prio > b.prio
  end
  if a.run_at ~= b.run_at then
    return a.run_at < b.run_at
  end
  return a.member < b.member -- zero-padded numbers: string order is enqueue order
end)

local out = {}
for i = 1, math.min(limit, #candidates) do
  local c = candidates[i]
  local n = unpad(c.member)
  if peek then
    out[#out + 1] = tostring(c.g)
    out[#out + 1] = c.p
    out[#out + 1] = fmt(c.run_at)
    out[#out + 1] = n
  else
    local k = groups[c.g]
    local jk = job_key(k, n)
    from_ready(k, n, c.p)
    local bad = fault(jk)
    local f = redis.call('HMGET', jk, 'status', 'name', 'payload', 'attempts', 'max_attempts',
      'backoff', 'timeout', 'lease', 'delivery', 'parent_id')
    if f[1] == 'pending' and bad then
      fail_corrupt(k, jk, n, now, bad, failed_ttl)
    elseif f[1] == 'pending' then -- anything else is a stale index entry: dropped above
      local attempts = (tonumber(f[4]) or 0) + 1
      local lease = tonumber(f[8])
      local token = prefix .. '.' .. n
      local expires = now + lease
      redis.call('HSET', jk, 'status', 'running', 'attempts', attempts, 'started_at', now,
        'worker_id', worker, 'token', token, 'lease_expires_at', expires)
      redis.call('ZADD', k.claims, expires, n)
      out[#out + 1] = tostring(c.g)
      out[#out + 1] = n
      out[#out + 1] = f[2]
      out[#out + 1] = f[3]
      out[#out + 1] = int(attempts)
      out[#out + 1] = int(tonumber(f[5]))
      out[#out + 1] = f[6] or ''
      out[#out + 1] = f[7] and fmt(tonumber(f[7])) or ''
      out[#out + 1] = fmt(lease)
      out[#out + 1] = token
      out[#out + 1] = f[9] or 'at_least_once'
      out[#out + 1] = f[10] or ''
    elseif not KNOWN_STATES[f[1] or ''] and redis.call('EXISTS', jk) == 1 then
      fail_corrupt(k, jk, n, now, bad, failed_ttl) -- its status itself is missing or corrupt
    end
  end
end
return out
