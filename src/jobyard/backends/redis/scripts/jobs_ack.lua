-- jobs_ack.lua: settle a batch of claimed jobs, each fenced by its lease token.
--
-- KEYS: the 16 keys of each queue group (see _base.lua).
-- ARGV: [1] now, "" = Redis TIME   [2] seconds a completed job is kept (0: forever) unless
--       the queue's config sets its own retention
--       [3] seconds a failed job is kept (0: forever)   [4] the key prefix
--       [5] "1" = a single node: release dependents in any queue here (see keys_at in _base.lua)
--           and push their wake tokens; "" = Cluster: only those of the completed job's queue
--       [6] JSON array of outcomes, each [group, number, token, kind, result|null, error|null,
--           delay]; kind is completed, retry, failed, cancelled or release
-- Touches: the settled job hashes (a completed one drops the fields only a next attempt reads;
--          reads each queue's config); per group the claims set, the ready levels, prios and pending
--          (retry, release) or a finished state's two indexes and idem (completed, failed,
--          cancelled); the throughput hash of the hour (completed and failed, see tally in
--          _lib.lua), once per queue and minute.
--          A job whose record turned corrupt while it ran (see fault() in _base.lua) is failed
--          with the reason unless the outcome completes it.
--          A completed job with dependents counts itself as an input of each (count_input in
--          _lib.lua): the last input moves a waiting step to pending, in this same script. On
--          Cluster a dependent in another queue (another slot) cannot be reached here: the job's
--          number goes into the owed set and the caller pays the release (jobs_release.lua),
--          then clears the entry; leases_reap.lua reports entries a dead caller left.
--          A completed job with dependents is held (the held set, no TTL) while one of them
--          has not completed, and a completed step takes a hold off each of its inputs, which
--          may free them (_flows.lua); on Cluster an input in another queue is owed ("f<n>").
-- Returns: the 1-based positions of the outcomes refused because the job was not running with
--          that token (a stale worker); nothing changed for those. Then, Cluster only, arrays:
--          {"owed", group, number, dependents} for each release owed, {"owed", group,
--          "f<number>", inputs} for each hold owed, and {"woke", group, count} for a group
--          whose own waiting jobs became pending (the caller wakes them).

local now = now_from(ARGV[1])
TALLY = {} -- the throughput history, written once per queue and minute (_lib.lua)
local result_ttl = tonumber(ARGV[2])
local failed_ttl = tonumber(ARGV[3])
local prefix = ARGV[4]
local single = ARGV[5] == '1'
local outcomes = cjson.decode(ARGV[6])
local notes = {} -- Cluster: owed releases and holds, and wake counts
local ctx = new_ctx(now, result_ttl, single, prefix, notes)
local woke = {} -- single node: wake list key -> count; Cluster: group -> count

-- Completed job n of group g (keys k) lists dependents `deps`: count it as their input.
local function release(k, g, n, deps)
  local owed = false
  for _, id in ipairs(split_ids(deps)) do
    local q, dn = parse_id(id)
    local base = '{' .. prefix .. ':' .. q .. '}:'
    if base == k.base or single then
      local dk = base == k.base and k or keys_at(base)
      if count_input(dk, dn, now, nil) == 1 then
        local key = single and '{' .. prefix .. '}:wake:' .. q or g
        woke[key] = (woke[key] or 0) + 1
      end
    else
      owed = true
    end
  end
  if owed then
    redis.call('HSET', k.owed, n, deps) -- with its dependents: the record may go first
    notes[#notes + 1] = {'owed', g, n, deps}
  end
end

local refused = {}
local groups = {}
local done = new_batch() -- claims left and finished index entries, one call per set
local freed = {} -- key slots the jobs give back, written at once (slots_free)
local kept = {} -- group -> seconds its completed jobs are kept (the queue's own, or ARGV[2])
for i, o in ipairs(outcomes) do
  local g, n, token, kind = o[1], o[2], o[3], o[4]
  local k = groups[g]
  if not k then
    k = queue_keys(g)
    groups[g] = k
    kept[g] = retention_of(k, result_ttl)
  end
  local jk = job_key(k, n)
  local cur = redis.call('HMGET', jk, 'status', 'token', 'priority', 'run_at', 'created_at',
    'dependents', 'idempotency_key', 'depends_on', 'name', 'key', 'slots')
  if cur[1] ~= 'running' or cur[2] ~= token then
    refused[#refused + 1] = i
  else
    -- a completion stands whatever else the record holds; any other outcome must requeue
    -- or finish it, so only those look for a fault
    local bad = kind ~= 'completed' and fault(jk)
    batch_add(done, 'ZREM', k.claims, n)
    local result, err = nz(o[5]), nz(o[6])
    if not (bad and kind ~= 'completed') then -- fail_corrupt frees it itself
      leave_running_later(freed, k, cur[9], cur[10], cur[11]) -- its key slots are free
    end
    if bad and kind ~= 'completed' then -- a retry or release could not requeue it
      fail_corrupt(k, jk, n, now, bad, failed_ttl)
    elseif kind == 'completed' then
      -- A completed job is final (only failed and cancelled jobs are retried): what only a next
      -- attempt reads (lease, backoff, timeout) goes with the claim's fields, and run_at when
      -- it equals created_at (the reader falls back to it): a smaller hash for the bulk of
      -- the store, in one HDEL and one HSET.
      local gone = {'token', 'lease_expires_at', 'lease', 'backoff', 'timeout'}
      if cur[4] == cur[5] then
        gone[#gone + 1] = 'run_at'
      end
      local set = {'status', 'completed', 'finished_at', now}
      if result then
        set[5], set[6] = 'result', result
      else
        gone[#gone + 1] = 'result'
      end
      redis.call('HDEL', jk, unpack(gone))
      redis.call('HSET', jk, unpack(set))
      if cur[6] and holds_at_completion(k, jk, n, cur[6]) then
        batch_add(done, 'ZADD', k.completed, n, n)
        redis.call('ZADD', k.held, now, n)
        release_idem(k, jk, n, cur[7])
      else
        to_finished(k, jk, n, 'completed', now, kept[g], done, cur[7])
      end
      if cur[6] then
        release(k, g, n, cur[6])
      end
      if cur[8] then
        ctx.g = g
        unhold_inputs(ctx, k, n, cur[8])
      end
    elseif kind == 'failed' then
      redis.call('HDEL', jk, 'token', 'lease_expires_at')
      redis.call('HSET', jk, 'status', 'failed', 'finished_at', now)
      if err then
        redis.call('HSET', jk, 'error', err)
      else
        redis.call('HDEL', jk, 'error')
      end
      to_finished(k, jk, n, 'failed', now, failed_ttl, done, cur[7])
    elseif kind == 'cancelled' then -- the handler stopped on a cancellation request
      redis.call('HDEL', jk, 'token', 'lease_expires_at')
      redis.call('HSET', jk, 'status', 'cancelled', 'finished_at', now)
      if err then
        redis.call('HSET', jk, 'error', err)
      end
      to_finished(k, jk, n, 'cancelled', now, failed_ttl, done, cur[7])
    elseif kind == 'retry' then
      redis.call('HDEL', jk, 'token', 'lease_expires_at')
      local run_at = now + o[7]
      redis.call('HSET', jk, 'status', 'pending', 'run_at', run_at)
      if err then
        redis.call('HSET', jk, 'error', err)
      else
        redis.call('HDEL', jk, 'error')
      end
      to_ready(k, n, cur[3], run_at)
    else -- release: a graceful stop gives the job back; the attempt does not count
      redis.call('HDEL', jk, 'token', 'lease_expires_at')
      redis.call('HSET', jk, 'status', 'pending', 'run_at', now)
      redis.call('HINCRBY', jk, 'attempts', -1)
      to_ready(k, n, cur[3], now)
    end
  end
end
batch_send(done)
slots_free(freed)
for key, count in pairs(woke) do
  if single then
    wake(key, count)
  else
    notes[#notes + 1] = {'woke', key, count}
  end
end
for _, note in ipairs(notes) do
  refused[#refused + 1] = note
end
tally_flush()
return refused
