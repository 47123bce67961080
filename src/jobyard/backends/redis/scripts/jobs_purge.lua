-- jobs_purge.lua: delete finished jobs that finished at or before a cutoff.
--
-- KEYS: the 16 keys of each queue group (see _lib.lua).
-- ARGV: [1] now, "" = Redis TIME   [2] number of groups   [3] older_than seconds
--       [4] at most this many deletions per call (the caller repeats until fewer come back)
--       [5..] finished states to purge (completed, failed, cancelled)
-- Touches: the deleted job hashes and their entries in each state's two indexes and in their
--          workflow's index (workflows, wf:<id>).
-- Returns: the number of jobs deleted.

local now = now_from(ARGV[1])
local ng = tonumber(ARGV[2])
local cutoff = now - tonumber(ARGV[3])
local left = tonumber(ARGV[4])
local deleted = 0
for g = 1, ng do
  local k = queue_keys(g)
  local has_wf = redis.call('EXISTS', k.workflows) == 1
  for i = 5, #ARGV do
    local st = ARGV[i]
    if left <= 0 then
      return deleted
    end
    local old = redis.call('ZRANGEBYSCORE', k['done_' .. st], '-inf', cutoff, 'LIMIT', 0, left)
    for _, n in ipairs(old) do
      drop_job(k, n, st, has_wf)
    end
    deleted = deleted + #old
    left = left - #old
  end
end
return deleted
