-- dead_groups.lua: group part of one queue's dead letter (Backend.dead_groups).
--
-- KEYS: the 16 keys of one queue group (see _lib.lua).
-- ARGV: [1] cursor: only job numbers below it, "" = from the newest   [2] failed jobs to walk
--       in this call   [3] bytes of each error's end to read the last line from
-- Touches: nothing (reads the failed index and the walked job hashes' name, error and
--          finished_at). The caller walks a queue in calls of a bounded size, so no call holds
--          the server for long, and merges the groups.
-- Returns: {stop, walked, then 6 strings per group: name, line, count, latest finished_at,
--          earliest, number of the newest job (the first walked)}; stop is the last number walked when entries may be
--          left, "" when the walk reached the end.
--
-- The line (base.error_line): the last line with anything but spaces, tabs and carriage
-- returns, without those around it, read from the error's last ARGV[3] bytes (cut at a whole
-- UTF-8 character).

local k = queue_keys(1)
local top = ARGV[1] == '' and '+inf' or '(' .. ARGV[1]
local budget = tonumber(ARGV[2])
local tail = tonumber(ARGV[3])

-- The line by plain scans (a pattern anchored with "$" is tried from every position: 0.3 ms a
-- traceback): the end's blanks dropped, then what follows the last "\n", trimmed.
local function last_line(err)
  local e = #err
  while e > 0 do
    local c = string.byte(err, e)
    if c ~= 32 and c ~= 9 and c ~= 13 and c ~= 10 then
      break
    end
    e = e - 1
  end
  local s, p = 0, string.find(err, '\n', 1, true)
  while p and p <= e do
    s = p
    p = string.find(err, '\n', p + 1, true)
  end
  local b = s + 1
  while b <= e do
    local c = string.byte(err, b)
    if c ~= 32 and c ~= 9 and c ~= 13 then
      break
    end
    b = b + 1
  end
  return string.sub(err, b, e)
end

local ns = redis.call('ZREVRANGEBYSCORE', k.failed, top, '-inf', 'LIMIT', 0, budget + 1)
local groups, order = {}, {}
local walked = math.min(#ns, budget)
for i = 1, walked do
  local n = ns[i]
  local f = redis.call('HMGET', job_key(k, n), 'name', 'error', 'finished_at')
  local err = f[2] or ''
  if #err > tail then
    err = string.sub(err, -tail)
    err = string.gsub(err, '^[\128-\191]+', '') -- no half of a character
  end
  local line = last_line(err)
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
