-- stage_abort.lua: delete what a batch abandoned before its commit staged (see "Staged batches"
-- in _lib.lua), a bounded number of jobs per call. Its jobs were never visible: every reader
-- hid their range, so they go as if they had never been written. The caller made sure the
-- batch cannot be committed any more (batch_decide.lua, batches_reap.lua).
--
-- KEYS: the 16 keys of each queue group (see _base.lua).
-- ARGV: [1] batch id   [2] lo   [3] hi (the batch's numbers)   [4] at most this many jobs
--       deleted per call (all groups)   [5] seconds the stage's tombstone is kept
-- Touches: per group the stage's hash (state "aborted", expiring after ARGV[5]: a slice that
--          arrives late finds it and writes nothing), the staged jobs (hashes, pending and
--          waiting entries, the idempotency keys they hold, workflows and wf:<id> entries,
--          inputs sets, a fair queue's turns entries), the stage's levels, and once its range
--          is empty the stages entry. A queue whose part is not hidden (published, or never
--          staged) loses nothing.
-- Returns: how many staged jobs are left to delete (call again until 0).

local b = ARGV[1]
local lo, hi = ARGV[2], ARGV[3]
local left = tonumber(ARGV[4])
local remaining = 0
for g = 1, #KEYS / NQ do
  local k = queue_keys(g)
  local sk = stage_key(k, b)
  redis.call('HSET', sk, 'state', 'aborted')
  redis.call('EXPIRE', sk, tonumber(ARGV[5]))
  local here = 0
  -- Only a range still hidden is deleted: a published part (gone from stages) is never touched.
  local hidden = redis.call('HEXISTS', k.stages, b) == 1
  for _, set in ipairs(hidden and {k.pending, k.waiting} or {}) do
    if left > 0 then
      local ns = redis.call('ZRANGEBYSCORE', set, lo, hi, 'LIMIT', 0, left)
      for _, n in ipairs(ns) do
        local jk = job_key(k, n)
        local f = redis.call('HMGET', jk, 'idempotency_key', 'workflow_id', 'turn', 'priority',
          'key')
        release_idem(k, jk, n, f[1] or false)
        if f[3] then -- a fair queue's turn, taken as it was staged; its key's latest, if it was
          redis.call('ZREM', turns_key(k, int(f[4])), pad(n))
          local latest = k.base .. 'turn'
          if redis.call('HGET', latest, f[5] or '') == f[3] then
            redis.call('HDEL', latest, f[5] or '')
          end
        end
        if f[2] then
          redis.call('ZREM', k.base .. 'wf:' .. f[2], n)
          redis.call('HDEL', k.workflows, n)
        end
        redis.call('DEL', jk, k.base .. 'inputs:' .. n)
        redis.call('ZREM', set, n)
      end
      left = left - #ns
    end
    here = here + redis.call('ZCOUNT', set, lo, hi)
  end
  remaining = remaining + here
  if here == 0 then
    for _, f in ipairs(redis.call('HKEYS', sk)) do
      local p = string.match(f, '^level:(.+)$')
      if p then
        redis.call('UNLINK', stage_level(k, b, p))
      end
    end
    redis.call('HDEL', k.stages, b)
  end
end
return remaining
