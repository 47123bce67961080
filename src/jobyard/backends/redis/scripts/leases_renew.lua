-- leases_renew.lua: heartbeat: push the lease of each (job, token) to now + that job's lease,
-- storing the handler's progress when given.
--
-- KEYS: the 16 keys of each queue group (see _base.lua).
-- ARGV: [1] now, "" = Redis TIME   [2] seconds a failed job is kept (0: forever): a corrupt
--       record fails instead   [3] JSON array of [group, number, token, progress|null,
--       note|null]
-- Touches: lease_expires_at, progress and progress_note of the renewed job hashes; their scores
--          in each group's claims set.
-- Returns: the 1-based positions of the jobs whose lease was lost (not running with that
--          token), and, negated, those of the renewed jobs with a cancellation request.

local now = now_from(ARGV[1])
local failed_ttl = tonumber(ARGV[2]) or 0
local items = cjson.decode(ARGV[3])

local lost = {}
local groups = {}
for i, it in ipairs(items) do
  local g, n, token = it[1], it[2], it[3]
  local k = groups[g]
  if not k then
    k = queue_keys(g)
    groups[g] = k
  end
  local jk = job_key(k, n)
  local cur = redis.call('HMGET', jk, 'status', 'token', 'lease')
  if cur[1] ~= 'running' or cur[2] ~= token then
    lost[#lost + 1] = i
  elseif fault(jk) then -- its lease cannot be renewed: failed, and lost to its worker
    fail_corrupt(k, jk, n, now, fault(jk), failed_ttl)
    lost[#lost + 1] = i
  else
    local expires = now + tonumber(cur[3])
    redis.call('HSET', jk, 'lease_expires_at', expires)
    redis.call('ZADD', k.claims, expires, n)
    local progress = nz(it[4])
    if progress then
      redis.call('HSET', jk, 'progress', progress)
      local note = nz(it[5])
      if note then
        redis.call('HSET', jk, 'progress_note', note)
      else
        redis.call('HDEL', jk, 'progress_note')
      end
    end
    if redis.call('HEXISTS', jk, 'cancel_requested_at') == 1 then
      lost[#lost + 1] = -i
    end
  end
end
return lost
