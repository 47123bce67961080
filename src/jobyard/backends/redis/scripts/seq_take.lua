-- seq_take.lua: on Redis Cluster, reserve job numbers and register queues before an insert
-- (there the insert script runs on the queue's slot and cannot reach these global keys).
--
-- KEYS: [1] the job sequence   [2] the queue registry set   (both on the "{prefix}" tag)
-- ARGV: [1] how many numbers   [2..] queue names to register
-- Touches: INCRBY on the sequence, SADD on the registry.
-- Returns: the first reserved number.

local count = tonumber(ARGV[1])
for i = 2, #ARGV do
  redis.call('SADD', KEYS[2], ARGV[i])
end
return redis.call('INCRBY', KEYS[1], count) - count + 1
