-- jobs_search.lua: a page of jobs by cursor, newest first (Backend.jobs_search), of one or more
-- queues, each walk bounded.
--
-- KEYS: the 16 keys of each queue group (see _base.lua).
-- ARGV: [1] number of groups   [2] status, "" = any   [3] job name, "" = any
--       [4] idempotency key, "" = any   [5] a substring of the payload, "" = any
--       [6] a substring of the error, "" = any   [7] cursor: only job numbers below it, "" = all
--       [8] limit (hits per walk)   [9] scan (entries walked per walk)
-- Touches: nothing (reads the state indexes and job hashes). The jobs of a batch still staged
--          are left out (visible_spans in _lib.lua).
-- Returns: per walk (one per group and state index, the state's or every one), an array
--          {group, stop, walked, hit1, hit2, ...}: stop is the last number walked when the walk
--          stopped early (at `limit` hits or `scan` entries), "" when it walked to the end; the
--          hits are job numbers, newest first. The caller merges the walks (backend.py).
--
-- Each state index but claims is scored by job number, so a walk is a reverse range from the
-- cursor; claims (scored by lease expiry) holds only the running jobs, so it is sorted here.
-- An index entry whose hash expired (retention) and is not pruned yet is walked, not a hit.

local ng = tonumber(ARGV[1])
local status = ARGV[2]
local name = ARGV[3]
local key = ARGV[4]
local contains = ARGV[5]
local error_contains = ARGV[6]
local before = ARGV[7]
local limit = tonumber(ARGV[8])
local scan = tonumber(ARGV[9])
local CHUNK = 200
local STATES = {'waiting', 'pending', 'running', 'completed', 'failed', 'cancelled'}
local top = before == '' and '+inf' or '(' .. before

local function hit(k, n)
  local f = redis.call('HMGET', job_key(k, n), 'name', 'idempotency_key', 'payload', 'error')
  if f[3] == false and redis.call('EXISTS', job_key(k, n)) == 0 then
    return false -- expired (retention), not pruned yet
  end
  return (name == '' or f[1] == name)
    and (key == '' or f[2] == key)
    and (contains == '' or string.find(f[3] or '', contains, 1, true) ~= nil)
    and (error_contains == '' or string.find(f[4] or '', error_contains, 1, true) ~= nil)
end

-- One walk: entries (numbers, newest first) given by next_chunk(from) until exhausted.
local function walk(g, k, next_chunk)
  local row = {tostring(g), '', 0}
  local walked, hits = 0, 0
  for _, span in ipairs(visible_spans(k)) do
    local from = span[1]
    if from == '+inf' then
      from = top
    elseif top ~= '+inf' and tonumber(string.sub(from, 2)) > tonumber(string.sub(top, 2)) then
      from = top
    end
    while true do
      local ns = next_chunk(from, span[2])
      if #ns == 0 then
        break
      end
      for _, n in ipairs(ns) do
        walked = walked + 1
        if hit(k, n) then
          row[#row + 1] = n
          hits = hits + 1
        end
        if hits >= limit or walked >= scan then
          row[2] = n
          row[3] = walked
          return row
        end
      end
      from = '(' .. ns[#ns]
    end
  end
  row[3] = walked
  return row
end

local out = {}
for g = 1, ng do
  local k = queue_keys(g)
  local states = status == '' and STATES or {status}
  for _, st in ipairs(states) do
    if st == 'running' then
      local all = redis.call('ZRANGE', k.claims, 0, -1)
      table.sort(all, function(a, b) return tonumber(a) > tonumber(b) end)
      out[#out + 1] = walk(g, k, function(from, low)
        local hi = from == '+inf' and math.huge or tonumber(string.sub(from, 2))
        local lo = low == '-inf' and -math.huge or tonumber(string.sub(low, 2)) or tonumber(low)
        local ns = {}
        for _, n in ipairs(all) do
          local x = tonumber(n)
          if x < hi and x > lo and #ns < CHUNK then
            ns[#ns + 1] = n
          end
        end
        return ns
      end)
    else
      local index = k[st]
      out[#out + 1] = walk(g, k, function(from, low)
        return redis.call('ZREVRANGEBYSCORE', index, from, low, 'LIMIT', 0, CHUNK)
      end)
    end
  end
end
return out
