-- queues_configure.lua: create or replace one queue's settings.
--
-- KEYS: the 16 keys of the queue (see _base.lua).
-- ARGV: [1] queue name   [2] JSON object of the settings that are set: max_concurrency,
--       max_attempts, backoff, max_pending, paused ("1"), retention (whole seconds a completed
--       job is kept: jobs_ack.lua and leases_reap.lua read it over the store's result_ttl),
--       and the limits the claim's gate reads (_gate.lua): rate_count, rate_per, rate_burst,
--       key_concurrency, key_rate_count, key_rate_per, key_rate_burst, fair ("1")
-- Touches: config (deleted and written whole, so an unset option falls back to the default);
--          when fair is newly set, the queue's turns, unturned and turn keys (rebuilt from the
--          pending jobs).
-- Returns: "OK".

local k = queue_keys(1)
local settings = cjson.decode(ARGV[2])
local fields = {'name', ARGV[1]}
local names = {'max_concurrency', 'max_attempts', 'backoff', 'max_pending', 'paused', 'retention',
  'rate_count', 'rate_per', 'rate_burst', 'key_concurrency', 'key_rate_count', 'key_rate_per',
  'key_rate_burst', 'fair'}
for _, f in ipairs(names) do
  local v = nz(settings[f])
  if v ~= nil then
    fields[#fields + 1] = f
    fields[#fields + 1] = v
  end
end
local was_fair = redis.call('HGET', k.config, 'fair') == '1'
redis.call('DEL', k.config)
redis.call('HSET', k.config, unpack(fields))
if settings.fair == '1' and not was_fair then
  -- Made fair: every pending job waits for a turn (see "Fair turns" in _lib.lua), given as
  -- claims find it due; turns of an earlier fair spell are dropped. One pass over the pending
  -- jobs, once.
  for _, p in ipairs(redis.call('ZRANGE', k.prios, 0, -1)) do
    if tonumber(p) then
      redis.call('DEL', turns_key(k, p), unturned_key(k, p))
    end
  end
  redis.call('DEL', k.base .. 'turn')
  for _, n in ipairs(redis.call('ZRANGE', k.pending, 0, -1)) do
    local f = redis.call('HMGET', job_key(k, n), 'priority', 'run_at')
    if tonumber(f[1]) and tonumber(f[2]) then
      redis.call('ZADD', unturned_key(k, f[1]), f[2], pad(n))
    end
  end
end
return 'OK'
