-- leases_reap.lua: apply the reaper's moves on lapsed leases (decided above the store, from
-- what leases_lapsed.lua read), each fenced. Retention is jobs_expire.lua's.
--
-- KEYS: the 16 keys of each queue group (see _base.lua); then, when ARGV[4] is "1" (a single
--       Redis node), one wake list per group.
-- ARGV: [1] now, "" = Redis TIME   [2] number of groups   [3] seconds a failed job is kept
--       (0: forever)   [4] "1" = wake lists follow   [5] owed entries to read per group
--       (Cluster)   [6] JSON array of moves, each [group, number, token, kind, error, delay];
--       kind is retry, failed or cancelled
-- Fence: a move applies only if its job is still running with that token and its claims entry
--        still lapsed (a renewal pushed it forward, an ack removed it: that one wins), and a
--        retry only if no cancellation was asked since the read (the next read decides it).
-- Touches: per applied move the claims set, the key slots (keyrun) and the job hash: back to
--          pending at now + delay (ready level, prios, pending; the attempt stays counted),
--          or finished (failed, cancelled: the state's two indexes and idem; a failed one is
--          counted in the throughput hash of the hour, tally in _lib.lua), or, for a corrupt
--          record, failed with the reason (see fault() in _base.lua).
--          Reads (Cluster, ARGV[4] ""): about ARGV[5] entries of each group's owed hash.
-- Returns: 4 strings per moved job: group, number, new status, name. Then, Cluster only, an array
--          {"owed", group, number, dependents} per release a completion left owed (jobs_ack.lua):
--          its caller may have died before paying it; the backend pays it (idempotent).

local now = now_from(ARGV[1])
TALLY = {} -- the throughput history, written once per queue and minute (_lib.lua)
local ng = tonumber(ARGV[2])
local failed_ttl = tonumber(ARGV[3])
local global = ARGV[4] == '1'
local owed_limit = tonumber(ARGV[5]) or 0
local moves = cjson.decode(ARGV[6])
local notes = {}
local requeued = {}

local out = {}
for _, m in ipairs(moves) do
  local g, n, token, kind, err, delay = m[1], m[2], m[3], m[4], m[5], tonumber(m[6]) or 0
  local k = queue_keys(g)
  local jk = job_key(k, n)
  local deadline = tonumber(redis.call('ZSCORE', k.claims, n))
  local f = redis.call('HMGET', jk, 'status', 'token', 'name', 'key', 'slots', 'priority',
    'cancel_requested_at')
  if deadline and deadline < now and f[1] == 'running' and f[2] == token
      and not (kind == 'retry' and f[7]) then
    redis.call('ZREM', k.claims, n)
    leave_running(k, jk, f[3], f[4], f[5]) -- a lapsed lease frees its key slots here
    redis.call('HDEL', jk, 'token', 'lease_expires_at')
    local bad = fault(jk)
    local status
    if bad then
      status = 'failed'
      fail_corrupt(k, jk, n, now, bad, failed_ttl)
    elseif kind == 'retry' then
      status = 'pending'
      local run_at = now + delay
      redis.call('HSET', jk, 'status', status, 'error', err, 'run_at', run_at)
      to_ready(k, n, f[6], run_at)
      if delay <= 0 then
        requeued[g] = (requeued[g] or 0) + 1
      end
    else
      status = kind
      redis.call('HSET', jk, 'status', status, 'error', err, 'finished_at', now)
      to_finished(k, jk, n, status, now, failed_ttl)
    end
    out[#out + 1] = tostring(g)
    out[#out + 1] = n
    out[#out + 1] = status
    out[#out + 1] = f[3] or ''
  end
end
for g = 1, ng do
  if global then
    if requeued[g] then
      wake(KEYS[ng * NQ + g], requeued[g])
    end
  elseif owed_limit > 0 then
    -- An owed entry keeps its dependents: the completed job's record may be purged first.
    local page = redis.call('HSCAN', queue_keys(g).owed, 0, 'COUNT', owed_limit)[2]
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
