-- batch_decide.lua: move a staged batch's record on (see "Staged batches" in _lib.lua): keep it
-- staging with a later deadline (its producer is alive), commit it (every slice is written:
-- from here on it is published, by its producer or the reaper), or abort it (its staged jobs
-- are deleted, by its producer or the reaper). The one place where a commit and an abort race:
-- whichever comes first wins.
--
-- KEYS: [1] the batches zset   [2] the batch's record   (both on the "{prefix}" tag)
-- ARGV: [1] now, "" = Redis TIME   [2] batch id   [3] the state wanted: "staging" (only a new
--       deadline), "committed" or "aborting"   [4] seconds to the new deadline
-- Touches: the record's state and the batch's deadline in the batches zset.
-- Returns: "ok" (the record is in the state wanted, now or already), or the state it holds
--          instead ("committed", "aborting", "published"; "missing" once it is gone).

local now = now_from(ARGV[1])
local wanted = ARGV[3]
local state = redis.call('HGET', KEYS[2], 'state')
if not state then
  return 'missing'
end
if state ~= wanted and state ~= 'staging' then
  return state
end
redis.call('HSET', KEYS[2], 'state', wanted)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[4]), ARGV[2])
return 'ok'
