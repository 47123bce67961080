-- leases_reap.lua: the watchdog. Recover running jobs whose lease lapsed (their worker stopped
-- renewing it). Retention is jobs_expire.lua's.
--
-- KEYS: the 16 keys of each queue group (see _lib.lua); then, when ARGV[7] is "1" (a single
--       Redis node), one wake list per group.
-- ARGV: [1] now, "" = Redis TIME   [2] number of groups   [3] limit (recovered jobs, all groups)
--       [4] seconds a failed job is kept (0: forever)   [5] the lease-lost error
--       [6] the at-most-once-lost error   [7] "1" = wake lists follow
--       [8] owed entries to read per group (Cluster)   [9] the cancelled-on-request error
-- Touches: per group the claims set, the key slots (keyrun) and the recovered job hashes: cancelled (a cancellation
--          was asked), back to pending (ready level, prios, pending; the attempt stays counted)
--          or failed (at_most_once, or attempts spent, or a corrupt record: see fault() in
--          _lib.lua); a failed one is counted in the throughput hash of the hour (tally in
--          _lib.lua).
--          Reads (Cluster, ARGV[7] ""): about ARGV[8] entries of each group's owed hash.
-- Returns: 4 strings per recovered job: group, number, new status, name. Then, Cluster only, an array
--          {"owed", group, number, dependents} per release a completion left owed (jobs_ack.lua):
--          its caller may have died before paying it; the backend pays it (idempotent).

local now = now_from(ARGV[1])
TALLY = {} -- the throughput history, written once per queue and minute (_lib.lua)
local ng = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local failed_ttl = tonumber(ARGV[4])
local lost_error = ARGV[5]
local at_most_once_error = ARGV[6]
local global = ARGV[7] == '1'
local owed_limit = tonumber(ARGV[8]) or 0
local cancel_error = ARGV[9]
local notes = {}

local out = {}
local left = limit
for g = 1, ng do
  local k = queue_keys(g)
  local requeued = 0
  if left > 0 then
    -- "(" makes the bound exclusive: a lease expiring exactly now is still held
    local lapsed = redis.call('ZRANGEBYSCORE', k.claims, '-inf', '(' .. fmt(now), 'LIMIT', 0, left)
    for _, n in ipairs(lapsed) do
      local jk = job_key(k, n)
      local f = redis.call('HMGET', jk, 'status', 'delivery', 'attempts', 'max_attempts', 'priority',
        'cancel_requested_at', 'name', 'key', 'slots')
      if redis.call('ZREM', k.claims, n) == 1 then
        leave_running(k, jk, f[7], f[8], f[9]) -- a lapsed lease frees its key slots here
      end
      local bad = fault(jk)
      if f[1] == 'running' then
        redis.call('HDEL', jk, 'token', 'lease_expires_at')
        local status
        if bad then
          status = 'failed'
          fail_corrupt(k, jk, n, now, bad, failed_ttl)
        elseif f[6] then
          status = 'cancelled'
          redis.call('HSET', jk, 'status', status, 'error', cancel_error, 'finished_at', now)
          to_finished(k, jk, n, status, now, failed_ttl)
        elseif f[2] == 'at_most_once' then
          status = 'failed'
          redis.call('HSET', jk, 'status', status, 'error', at_most_once_error, 'finished_at', now)
          to_finished(k, jk, n, status, now, failed_ttl)
        elseif (tonumber(f[3]) or 0) >= tonumber(f[4]) then
          status = 'failed'
          redis.call('HSET', jk, 'status', status, 'error', lost_error, 'finished_at', now)
          to_finished(k, jk, n, status, now, failed_ttl)
        else
          status = 'pending'
          redis.call('HSET', jk, 'status', status, 'error', lost_error, 'run_at', now)
          to_ready(k, n, f[5], now)
          requeued = requeued + 1
        end
        out[#out + 1] = tostring(g)
        out[#out + 1] = n
        out[#out + 1] = status
        out[#out + 1] = f[7] or ''
        left = left - 1
      end
    end
  end
  if global then
    wake(KEYS[ng * NQ + g], requeued)
  elseif owed_limit > 0 then
    -- An owed entry keeps its dependents: the completed job's record may be purged first.
    local page = redis.call('HSCAN', k.owed, 0, 'COUNT', owed_limit)[2]
    for i = 1, math.min(#page, 2 * owed_limit), 2 do
      notes[#notes + 1] = {'owed', g, page[i], page[i + 1]}
    end
  end
end
for _, note in ipairs(notes) do
  out[#out + 1] = note
end
tally_flush()
return out
