-- jobs_insert_one.lua: insert one plain job on a single Redis node: the common enqueue, in as
-- little Lua as it needs. Only _base.lua is prepended (the general prelude costs 30-50 us of
-- Redis time a call from cold), and the queue's keys are built from one declared key. A plain
-- job has no idempotency key, no limit key and no workflow; its queue is neither fair nor fed
-- with a time to live. jobs_insert.lua inserts every other batch, and this job too when this
-- script hands it over.
--
-- KEYS: [1] the queue's config hash (its other keys, built from it, carry its hash tag)
--       [2] the job sequence   [3] the queue registry set   [4] the queue's wake list
-- ARGV: [1] now, "" = Redis TIME   [2] the queue's name   [3] default max_attempts
--       [4] JSON array of one job as jobs_insert.lua's ARGV[8] holds it (its group 1, its
--           idempotency key null, no workflow columns)
-- Touches: reads the queue's config and ttl (and its pending and waiting counts when it has a
--          max_pending); writes the job hash, its ready level, prios and pending; INCRBY on the
--          sequence, SADD on the registry, LPUSH/LTRIM on the wake list (what insert_jobs in
--          _lib.lua writes for such a job).
-- Returns: the job's number; {"full", max_pending} having written nothing; or {"general"} having
--          written nothing: the queue is fair (the job takes a turn) or was fed with a time to
--          live (it may have lapsed): the caller sends the job to jobs_insert.lua.

local k = keys_at(string.sub(KEYS[1], 1, -7)) -- strip "config": "{prefix:queue}:"
if redis.call('EXISTS', k.ttl) == 1 then
  return {'general'}
end
local cfg = redis.call('HMGET', k.config, 'max_attempts', 'backoff', 'max_pending', 'fair')
if cfg[4] == '1' then
  return {'general'}
end
if over_cap(k, cfg[3], 1) then
  return {'full', cfg[3]}
end
local now = now_from(ARGV[1])
local job = cjson.decode(ARGV[4])[1]
local n = int(redis.call('INCRBY', KEYS[2], 1))
local fields, prio, run_at = new_fields(job, 'pending', now, cfg[1], cfg[2], tonumber(ARGV[3]))
redis.call('HSET', job_key(k, n), unpack(fields))
-- what to_ready does for a queue that is not fair
redis.call('ZADD', k.base .. 'ready:' .. prio, run_at, pad(n))
redis.call('ZADD', k.prios, prio, prio)
redis.call('ZADD', k.pending, n, n)
redis.call('SADD', KEYS[3], ARGV[2])
wake(KEYS[4], 1)
return n
