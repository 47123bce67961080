-- jobs_list.lua: jobs of one or more queues, newest first, filtered by status, name and workflow.
--
-- KEYS: the 16 keys of each queue group (see _base.lua).
-- ARGV: [1] number of groups   [2] status, "" = any   [3] job name, "" = any
--       [4] offset   [5] limit   [6] workflow id, "" = any (then the workflow's index
--       "wf:<id>" of each queue is read instead of the state indexes)
-- Touches: nothing (reads the state indexes and job hashes). The jobs of a batch still staged
--          are left out (see "Staged batches" in _lib.lua).
-- Returns: one array per job: {group, number, field1, value1, ...}.
--
-- Each state index is scored by job number, so newest first is a reverse range; a name filter
-- reads on in chunks until it has offset + limit matches. A job whose status field is corrupt is
-- listed under the index it is in. Entries whose hash has expired
-- (retention) are skipped until the reaper prunes them.

local ng = tonumber(ARGV[1])
local status = ARGV[2]
local name = ARGV[3]
local offset = tonumber(ARGV[4])
local limit = tonumber(ARGV[5])
local want = offset + limit
local CHUNK = 200
local workflow = ARGV[6] or ''
local STATES = {'waiting', 'pending', 'running', 'completed', 'failed', 'cancelled'}

-- Whether a job of index entry n matches: its status st ("" = any; a corrupt status matches
-- the index it is in) and the name filter.
local function matches(k, n, st)
  local f = redis.call('HMGET', job_key(k, n), 'status', 'name')
  if f[1] == false and redis.call('EXISTS', job_key(k, n)) == 0 then
    return false -- expired (retention), not pruned yet; a hash without status is listed
  end
  return (st == '' or f[1] == st or not KNOWN_STATES[f[1] or '']) and (name == '' or f[2] == name)
end

-- The newest `want` matching numbers of index `key` (scored by number), as {n, g} entries. It
-- reads on from the last number seen (an index seek, however deep the listing goes).
local function newest_in(k, g, key, st, found)
  local got = 0
  for _, span in ipairs(visible_spans(k)) do
    local top = span[1]
    while got < want do
      local ns = redis.call('ZREVRANGEBYSCORE', key, top, span[2], 'LIMIT', 0, CHUNK)
      if #ns == 0 then
        break
      end
      for _, n in ipairs(ns) do
        if matches(k, n, st) then
          found[#found + 1] = {n = n, g = g}
          got = got + 1
          if got >= want then
            break
          end
        end
      end
      top = '(' .. ns[#ns]
    end
  end
end

-- The newest `want` matching numbers of one state's index, as {n = number, g = group} entries.
local function newest(k, g, st, found)
  local key = k[st]
  local got = 0
  if st == 'running' then
    -- claims is scored by lease expiry; it holds no more than the running jobs, so sort here
    local ns = redis.call('ZRANGE', key, 0, -1)
    table.sort(ns, function(a, b) return tonumber(a) > tonumber(b) end)
    for _, n in ipairs(ns) do
      if got >= want then
        break
      end
      if matches(k, n, st) then
        found[#found + 1] = {n = n, g = g}
        got = got + 1
      end
    end
    return
  end
  newest_in(k, g, key, st, found)
end

local found = {}
for g = 1, ng do
  local k = queue_keys(g)
  if workflow ~= '' then
    newest_in(k, g, k.base .. 'wf:' .. workflow, status, found)
  elseif status == '' then
    for _, st in ipairs(STATES) do
      newest(k, g, st, found)
    end
  else
    newest(k, g, status, found)
  end
end
table.sort(found, function(a, b) return tonumber(a.n) > tonumber(b.n) end)

local out = {}
for i = offset + 1, math.min(want, #found) do
  local e = found[i]
  local row = {tostring(e.g), e.n}
  for _, v in ipairs(redis.call('HGETALL', job_key(queue_keys(e.g), e.n))) do
    row[#row + 1] = v
  end
  out[#out + 1] = row
end
return out
