-- leases_lapsed.lua: read the running jobs whose lease lapsed (their worker stopped renewing
-- it), for the reaper above the store to decide on (jobyard.retry.decide_lapsed); the move
-- is leases_reap.lua's.
--
-- KEYS: the 16 keys of each queue group (see _base.lua).
-- ARGV: [1] now, "" = Redis TIME   [2] number of groups   [3] limit (lapsed jobs, all groups)
-- Touches: nothing but a dangling claims entry it meets (its job hash gone or no longer running,
--          which no move leaves but an eviction or a hand edit may): the entry is dropped and
--          the key slots it held (keyrun) freed, since nothing holds that lease any more.
--          Reads per group the claims set (the lease deadlines) and the lapsed job hashes.
-- Returns: 9 strings per lapsed job, longest lapsed first within a group: group, number,
--          token, name, attempts, max_attempts, backoff ("" for the default policy), delivery,
--          "1" when a cancellation was asked (else ""). A corrupt record is returned as it
--          reads (numbers that do not parse as "0"): leases_reap.lua fails it with the reason.

local now = now_from(ARGV[1])
local ng = tonumber(ARGV[2])
local left = tonumber(ARGV[3])

local function count(x)
  local v = tonumber(x)
  if v == nil or not (v >= 0 and v <= 2147483647) then -- not NaN, nor out of bounds
    return '0'
  end
  return int(math.floor(v))
end

local out = {}
for g = 1, ng do
  if left <= 0 then
    break
  end
  local k = queue_keys(g)
  -- "(" makes the bound exclusive: a lease expiring exactly now is still held
  local lapsed = redis.call('ZRANGEBYSCORE', k.claims, '-inf', '(' .. fmt(now), 'LIMIT', 0, left)
  for _, n in ipairs(lapsed) do
    local jk = job_key(k, n)
    local f = redis.call('HMGET', jk, 'status', 'token', 'name', 'attempts', 'max_attempts',
      'backoff', 'delivery', 'cancel_requested_at', 'key', 'slots')
    if f[1] == 'running' then
      out[#out + 1] = tostring(g)
      out[#out + 1] = n
      out[#out + 1] = f[2] or ''
      out[#out + 1] = f[3] or ''
      out[#out + 1] = count(f[4])
      out[#out + 1] = count(f[5])
      out[#out + 1] = f[6] or ''
      out[#out + 1] = f[7] or 'at_least_once'
      out[#out + 1] = f[8] and '1' or ''
      left = left - 1
    elseif redis.call('ZREM', k.claims, n) == 1 then
      leave_running(k, jk, f[3], f[9], f[10])
    end
  end
end
return out
