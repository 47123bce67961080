-- dead_groups.lua: group part of one queue's dead letter (Backend.dead_groups).
--
-- KEYS: the 16 keys of one queue group (see _base.lua).
-- ARGV: [1] cursor: only job numbers below it, "" = from the newest   [2] failed jobs to walk
--       in this call   [3] bytes of each error's end to read the last line from
-- Touches: nothing. Reads the failed index and the walked job hashes' name, dead_line and
--          finished_at (dead_line: the line stored as the job failed, see to_finished in
--          _lib.lua; the error is read only for a job that failed before lines were stored).
--          The caller walks a queue in calls of a bounded size, so no call holds the server
--          for long, and merges the groups.
-- Returns: {stop, walked, then 6 strings per group: name, line, count, latest finished_at,
--          earliest, number of the newest job (the first walked)}; stop is the last number
--          walked when entries may be left, "" when the walk reached the end.

local k = queue_keys(1)
local top = ARGV[1] == '' and '+inf' or '(' .. ARGV[1]
local budget = tonumber(ARGV[2])
local tail = tonumber(ARGV[3])

local ns = redis.call('ZREVRANGEBYSCORE', k.failed, top, '-inf', 'LIMIT', 0, budget + 1)
local groups, order = {}, {}
local walked = math.min(#ns, budget)
for i = 1, walked do
  local n = ns[i]
  local f = redis.call('HMGET', job_key(k, n), 'name', 'dead_line', 'finished_at')
  local line = f[2]
  if not line then -- failed before its line was stored (to_finished, _lib.lua)
    line = dead_line(redis.call('HGET', job_key(k, n), 'error'), tail)
  end
  local name = f[1] or ''
  local at = tonumber(f[3]) or 0
  local id = name .. '\0' .. line
  local g = groups[id]
  if not g then
    g = {name = name, line = line, count = 0, newest = at, oldest = at, sample = n}
    groups[id] = g
    order[#order + 1] = g
  end
  g.count = g.count + 1
  if at > g.newest then
    g.newest = at
  end
  if at < g.oldest then
    g.oldest = at
  end
end

local out = {#ns > budget and ns[walked] or '', tostring(walked)}
for _, g in ipairs(order) do
  out[#out + 1] = g.name
  out[#out + 1] = g.line
  out[#out + 1] = tostring(g.count)
  out[#out + 1] = fmt(g.newest)
  out[#out + 1] = fmt(g.oldest)
  out[#out + 1] = g.sample
end
return out
