-- batch_close.lua: forget a batch written in several calls once it is published (and its
-- segments merged) or deleted, and wake the workers of the queues it made jobs due in (Cluster:
-- a single node's publish wakes them itself).
--
-- KEYS: [1] the batches zset   [2] the batch's record   [3..] wake lists (on the "{prefix}" tag)
-- ARGV: [1] batch id   [2..] one token count per wake list
-- Touches: the record (deleted), the batch's entry in the batches zset, LPUSH/LTRIM on the
--          wake lists.
-- Returns: "OK".

redis.call('DEL', KEYS[2])
redis.call('ZREM', KEYS[1], ARGV[1])
for i = 3, #KEYS do
  wake(KEYS[i], tonumber(ARGV[i - 1]))
end
return 'OK'
