-- batch_open.lua: open a batch written in several calls (see "Staged batches" in _lib.lua):
-- reserve its job numbers, register its queues, and record it with a deadline, past which the
-- reaper (batches_reap.lua) takes it over from a producer that stopped.
--
-- KEYS: [1] the job sequence   [2] the queue registry set   [3] the batches zset (batch id ->
--       deadline)   [4] the batch's record (hash)   (all on the "{prefix}" tag)
-- ARGV: [1] now, "" = Redis TIME   [2] how many job numbers   [3] seconds to the deadline
--       [4] the batch id   [5] JSON array of the batch's queue names
-- Touches: INCRBY on the sequence, SADD on the registry; the record (state "staging", queues,
--          lo, hi) and the batch's entry in the batches zset.
-- Returns: {first reserved number, the batch's now} (every slice stamps the jobs with that now).

local now = now_from(ARGV[1])
local count = tonumber(ARGV[2])
local queues = cjson.decode(ARGV[5])
for _, q in ipairs(queues) do
  redis.call('SADD', KEYS[2], q)
end
local first = redis.call('INCRBY', KEYS[1], count) - count + 1
redis.call('HSET', KEYS[4], 'state', 'staging', 'queues', ARGV[5], 'lo', first,
  'hi', first + count - 1)
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[3]), ARGV[4])
return {first, fmt(now)}
