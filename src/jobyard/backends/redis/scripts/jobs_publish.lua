-- jobs_publish.lua: make a staged batch visible (see "Staged batches" in _lib.lua): per queue,
-- its ready entries become claimable and its range stops being hidden, in one move whatever
-- the batch's size. On a single node this script also commits the batch, so every queue of it
-- becomes visible at once; on Cluster batch_decide.lua committed it before (one call per queue
-- follows, each safe to repeat: the reaper finishes what a producer that stopped left).
--
-- KEYS: the 16 keys of each queue group (see _base.lua); then, when ARGV[3] is "1" (a single
--       Redis node): the batches zset, the batch's record, and one wake list per group.
-- ARGV: [1] now, "" = Redis TIME   [2] batch id   [3] "1" = single node (commit, wake here)
--       [4] queue ttl in ms, "" = none   [5] seconds to the deadline of a batch whose
--       segments are still to merge (single node)
-- Touches: single node: the record (must be "staging"; deleted, or "published" while segments
--          are left to merge) and its deadline. Per group: the stage's levels (renamed to the
--          ready level when that is empty, else to a segment "ready:<p>@<batch>"), prios, the
--          stages hash (the range no longer hidden), the stage's hash (deleted), ttl/alive
--          (ARGV[4]); the wake lists (single node).
-- Returns: {"ok", segments, due1, due2, ...}: how many segments were made (ready_merge.lua
--          moves them into their levels; 1 also for a repeat of a published batch's call) and
--          per group how many jobs became due (the caller wakes them on Cluster); or {"gone"}
--          (the batch was abandoned before it was committed: nothing changed).

local now = now_from(ARGV[1])
local b = ARGV[2]
local single = ARGV[3] == '1'
local ttl_ms = ARGV[4]
local ng = #KEYS
local record
if single then
  ng = (#KEYS - 2) / (NQ + 1)
  record = KEYS[ng * NQ + 2]
  local state = redis.call('HGET', record, 'state')
  if state == 'published' then
    return {'ok', 1}
  end
  if state ~= 'staging' then
    return {'gone'}
  end
else
  ng = #KEYS / NQ
end

local out = {'ok', 0}
for g = 1, ng do
  local k = queue_keys(g)
  local sk = stage_key(k, b)
  local due = 0
  local state = redis.call('HGET', sk, 'state')
  if state == 'aborted' then
    return {'gone'}
  end
  if state then
    for _, f in ipairs(redis.call('HKEYS', sk)) do
      local p = string.match(f, '^level:(.+)$')
      local level = p and stage_level(k, b, p)
      if level and redis.call('EXISTS', level) == 1 then
        due = due + redis.call('ZCARD', level)
        local main = k.base .. 'ready:' .. p
        if redis.call('EXISTS', main) == 0 then
          redis.call('RENAME', level, main)
          redis.call('ZADD', k.prios, p, p)
        else
          redis.call('RENAME', level, main .. '@' .. b)
          redis.call('ZADD', k.prios, p, p .. '@' .. b)
          out[2] = out[2] + 1
        end
      end
    end
    redis.call('HDEL', k.stages, b)
    redis.call('DEL', sk)
    if ttl_ms ~= '' then
      redis.call('SET', k.ttl, ttl_ms)
      redis.call('SET', k.alive, '1', 'PX', ttl_ms)
    end
  end
  if single then
    wake(KEYS[ng * NQ + 2 + g], due)
  end
  out[#out + 1] = due
end
if single then
  if out[2] > 0 then
    redis.call('HSET', record, 'state', 'published')
    redis.call('ZADD', KEYS[ng * NQ + 1], now + tonumber(ARGV[5]), b)
  else
    redis.call('DEL', record)
    redis.call('ZREM', KEYS[ng * NQ + 1], b)
  end
end
return out
