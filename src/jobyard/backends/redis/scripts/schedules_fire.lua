-- schedules_fire.lua: fire one tick of a recurring job: move the schedule on and insert its
-- job, together, only if the schedule still waits for this tick (so of many workers racing for
-- the tick exactly one fires it).
--
-- KEYS: the 16 keys of the job's queue (see _base.lua); [14] the schedule's hash; then, when
--       ARGV[6] is "1" (a single Redis node): the job sequence, the queue registry set and the
--       queue's wake list.
-- ARGV: [1] now, "" = Redis TIME   [2] fire_at (the tick)   [3] next_at (the following tick)
--       [4] the job's idempotency key (decided by the caller)   [5] a reserved job number, "" =
--       take one from the sequence key   [6] "1" = the global keys follow
--       [7] default max_attempts
-- Touches: the schedule hash (next_run_at, last_run_at); what jobs_insert.lua touches.
-- Returns: {"ok", number, "1" created | "0" held by a job with its idempotency key},
--          {"full", queue, max_pending} (nothing changed), {"busy", queue, key} (its key is
--          held by a job of a batch still staged: nothing changed, send again later) or
--          {"skip"} (not active, paused, or not waiting for this tick).

local sk = KEYS[NQ + 1]
local fire_at = tonumber(ARGV[2])
local s = redis.call('HMGET', sk, 'active', 'next_run_at', 'job', 'queue', 'paused')
-- stores round: a tick matches within 1 ms
if s[1] ~= '1' or s[5] == '1' or not s[2] or math.abs(tonumber(s[2]) - fire_at) > 0.001 then
  return {'skip'}
end
local job = cjson.decode(s[3]) -- NewJob.to_json(): {name, payload, priority, max_attempts, ...}
if job[1] ~= nil then -- the positional list of versions before it, in a schedule not synced since
  job = {name = job[1], payload = job[2], priority = job[3], max_attempts = job[4],
         backoff = job[5], timeout = job[6], lease = job[7], delivery = job[8], parent_id = job[10]}
end
local row = {
  1, job.name, job.payload, job.priority, 0, fire_at, job.max_attempts, job.backoff, job.timeout,
  job.lease, job.delivery, ARGV[4], job.parent_id,
}
local o = {
  now = now_from(ARGV[1]),
  names = {s[4]},
  jobs = {row},
  ttl_ms = '',
  dry = false,
  default_attempts = tonumber(ARGV[7]),
}
if ARGV[5] ~= '' then
  o.numbers = {tonumber(ARGV[5])}
end
if ARGV[6] == '1' then
  o.seq_key = KEYS[NQ + 2]
  o.registry = KEYS[NQ + 3]
  o.wake_keys = {KEYS[NQ + 4]}
end
local out = insert_jobs(o)
if out[1] == 'ok' then
  redis.call('HSET', sk, 'next_run_at', ARGV[3], 'last_run_at', ARGV[2])
end
return out
