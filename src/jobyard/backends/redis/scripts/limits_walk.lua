-- limits_walk.lua: count part of one queue's pending jobs by job name and key, and with the
-- first call its running jobs (Backend.limits_stats).
--
-- KEYS: the 16 keys of one queue group (see _lib.lua).
-- ARGV: [1] now, "" = Redis TIME   [2] cursor: only job numbers above it, "" = from the oldest
--       [3] pending jobs to read in this call   [4] "1": count the running jobs too
-- Touches: nothing. Reads the pending index oldest first and the read jobs' name, key and
--          run_at; with ARGV[4] the claims set and its jobs' name and key. The jobs of a batch
--          still staged are left out (see "Staged batches" in _lib.lua): a call stops at the
--          first one and the next starts past its batch. The caller walks a queue in calls of a
--          bounded size, so no call holds the server for long, and sums them.
-- Returns: {stop, counted, then 5 strings per (name, key): name, key ("" = none), pending,
--          due (run_at <= now), running}; stop is where the next call starts when entries may
--          be left, "" when the walk reached the end of the queue's pending jobs.

local k = queue_keys(1)
local now = now_from(ARGV[1])
local low = ARGV[2] == '' and '-inf' or '(' .. ARGV[2]
local budget = tonumber(ARGV[3])
local ranges = redis.call('EXISTS', k.stages) == 1 and stage_ranges(k) or {}

local cells, order = {}, {}
local function cell(name, key)
  local id = name .. '\0' .. key
  local c = cells[id]
  if not c then
    c = {name = name, key = key, pending = 0, due = 0, running = 0}
    cells[id] = c
    order[#order + 1] = c
  end
  return c
end

local ns = {}
if budget > 0 then
  ns = redis.call('ZRANGEBYSCORE', k.pending, low, '+inf', 'LIMIT', 0, budget)
end
local stop = ''
if budget > 0 and #ns == budget then
  stop = ns[#ns]
end
local counted = 0
for _, n in ipairs(ns) do
  local staged_to = nil
  local x = tonumber(n)
  for _, r in ipairs(ranges) do
    if x >= r[1] and x <= r[2] then
      staged_to = r[2]
    end
  end
  if staged_to then
    stop = int(staged_to) -- hidden from every reader: the next call starts past its batch
    break
  end
  local f = redis.call('HMGET', job_key(k, n), 'name', 'key', 'run_at')
  if f[1] then
    local c = cell(f[1], f[2] or '')
    c.pending = c.pending + 1
    if (tonumber(f[3]) or 0) <= now then
      c.due = c.due + 1
    end
    counted = counted + 1
  end
end

if ARGV[4] == '1' then
  for _, n in ipairs(redis.call('ZRANGE', k.claims, 0, -1)) do
    local f = redis.call('HMGET', job_key(k, n), 'name', 'key')
    if f[1] then
      local c = cell(f[1], f[2] or '')
      c.running = c.running + 1
    end
  end
end

local out = {stop, tostring(counted)}
for _, c in ipairs(order) do
  out[#out + 1] = c.name
  out[#out + 1] = c.key
  out[#out + 1] = tostring(c.pending)
  out[#out + 1] = tostring(c.due)
  out[#out + 1] = tostring(c.running)
end
return out
