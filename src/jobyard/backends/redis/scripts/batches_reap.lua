-- batches_reap.lua: take over the batches written in several calls whose producer stopped
-- before finishing (their deadline passed; see "Staged batches" in _lib.lua). A batch still
-- staging is aborted here (the caller deletes its staged jobs); a committed one is left
-- committed (the caller publishes what is left of it); a published one still has segments to
-- merge. Each taken batch gets a new deadline, so two reapers rarely work on one batch (they
-- may: every step after this one is safe to repeat).
--
-- KEYS: [1] the batches zset   (on the "{prefix}" tag; the records share it)
-- ARGV: [1] now, "" = Redis TIME   [2] at most this many batches   [3] the prefix of the record
--       keys ("{prefix}:batch:")   [4] seconds to the new deadline of a batch taken over
-- Touches: the batches zset (deadlines; an entry without a record is dropped); the records of
--          batches taken over ("staging" becomes "aborting").
-- Returns: per batch taken over: {batch id, state, queues JSON, lo, hi}.

local now = now_from(ARGV[1])
local out = {}
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
for _, b in ipairs(due) do
  local r = redis.call('HMGET', ARGV[3] .. b, 'state', 'queues', 'lo', 'hi')
  if not r[1] then
    redis.call('ZREM', KEYS[1], b)
  else
    if r[1] == 'staging' then
      r[1] = 'aborting'
      redis.call('HSET', ARGV[3] .. b, 'state', r[1])
    end
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[4]), b)
    out[#out + 1] = {b, r[1], r[2], r[3], r[4]}
  end
end
return out
