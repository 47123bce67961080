-- jobs_stage.lua: write one slice of a batch written in several calls (see "Staged batches" in
-- _lib.lua). Its jobs are stored, all or nothing for this slice, but hidden from every reader
-- until jobs_publish.lua makes the whole batch visible.
--
-- KEYS: the 16 keys of each queue group (see _base.lua).
-- ARGV: [1] the batch's now (from batch_open.lua: every slice stamps the same created_at)
--       [2] JSON array of the groups' queue names   [3] JSON array of a job number per job
--       (reserved by batch_open.lua)   [4] batch id   [5] lo   [6] hi (the batch's numbers)
--       [7] default max_attempts   [8] JSON array of jobs, as jobs_insert.lua's ARGV[8]
--       describes, the links given as ids
-- Touches: per group the stage's hash (created "open") and the queue's stages hash (the
--          batch's range, hidden from then on); then what jobs_insert.lua touches, except
--          that ready entries go to the stage's own levels (no prios, no wake list, no
--          registry, no ttl) and that a job whose hash exists already (this slice sent again
--          after its reply was lost) is not written again: a repeat answers as the first did.
-- Returns: as jobs_insert.lua ({"ok", numbers, flags} or {"full", queue, max_pending}, each
--          counting the batch's slices written before: its staged jobs count against
--          max_pending), {"busy", queue, key} (a job of another batch still staged holds an
--          idempotency key: nothing written, send it again later) or {"gone"} (the batch was
--          abandoned, by its producer or the reaper: nothing written).

local names = cjson.decode(ARGV[2])
local b = ARGV[4]
for g = 1, #names do
  local k = queue_keys(g)
  local state = redis.call('HGET', stage_key(k, b), 'state')
  if state == 'aborted' then
    return {'gone'}
  end
  if not state then
    redis.call('HSET', stage_key(k, b), 'state', 'open')
    redis.call('HSET', k.stages, b, ARGV[5] .. ' ' .. ARGV[6])
  end
end
return insert_jobs({
  now = tonumber(ARGV[1]),
  names = names,
  numbers = cjson.decode(ARGV[3]),
  jobs = cjson.decode(ARGV[8]),
  ttl_ms = '',
  dry = false,
  default_attempts = tonumber(ARGV[7]),
  stage = {id = b, lo = tonumber(ARGV[5]), hi = tonumber(ARGV[6])},
})
