-- jobs_claim_one.lua: claim up to a limit of due jobs from one queue whose gate is open (or
-- limited by the queue's own rate alone: the claim takes what its bucket admits), on a
-- single Redis node: the claim an idle worker makes when a push wakes it (it runs while the
-- enqueue that woke it waits for its reply), in as little Lua as it needs. _base.lua and
-- _gate.lua are prepended, not the general library (30-50 us of Redis time a call from cold),
-- and the queue's keys are built from one declared key. jobs_claim.lua claims in every other
-- case, and in this one too when this script hands it over.
--
-- KEYS: [1] the queue's config hash (its other keys, built from it, carry its hash tag)
-- ARGV: [1] now, "" = Redis TIME   [2] limit   [3] worker id
--       [4] token prefix (random, fresh per call; the token is "<prefix>.<number>")
-- Touches: what jobs_claim.lua touches for such a queue: its ready levels, prios, pending and
--          claims sets and the claimed job hashes (status running, attempts + 1, started_at,
--          worker_id, token, lease_expires_at; slots "" for a job with a limit key), and the
--          queue's rate bucket (see _gate.lua).
-- Returns: what jobs_claim.lua returns (next_open, "" unless the queue's rate cut the claim,
--          then 13 strings per claimed job; its group is 1); or {"general"} having written
--          nothing, for jobs_claim.lua to claim: the queue was fed with a time to live (it may
--          lapse), its gate is not open (a key limit, a job name's limits: all but the queue's
--          own rate) or it is fair, it has a published batch's segment beside
--          a level, or a due job's record is corrupt or holds a fair turn.
--
-- Order, as jobs_claim.lua's: priority DESC, run_at ASC, enqueue order ASC. A due entry whose
-- job is no longer pending (a stale entry) leaves its level and pending, and counts against the
-- limit, as there.

local k = keys_at(string.sub(KEYS[1], 1, -7)) -- strip "config": "{prefix:queue}:"
local GENERAL = {'general'}
if redis.call('EXISTS', k.ttl) == 1 then
  return GENERAL
end
local now = now_from(ARGV[1])
local gate = gate_open(k, now, tonumber(ARGV[2]))
if not (gate.open or gate.rate_only) or gate.fair then
  return GENERAL
end
-- The queue's own rate alone cuts the room to what its bucket admits (no job's name or key
-- matters to it), and counts the starts below.
local rate = gate.rate_only and gate.room > 0 and gate_room(gate)
local room = gate.room -- paused: 0; max_concurrency: what is left of it; a rate: what it admits
local levels = redis.call('ZREVRANGE', k.prios, 0, -1)
for _, p in ipairs(levels) do
  if not tonumber(p) then
    return GENERAL -- a segment: several keys of one priority, merged by jobs_claim.lua
  end
end

-- Read first, write after: a reason to hand over is found before anything is written.
local picked, emptied = {}, {} -- picked: {level, p, member, n, run_at, f (nil: stale)}
for _, p in ipairs(levels) do
  if #picked >= room then
    break
  end
  local level = k.base .. 'ready:' .. p
  local due = redis.call('ZRANGEBYSCORE', level, '-inf', now, 'WITHSCORES', 'LIMIT', 0,
    room - #picked)
  if #due == 0 and redis.call('EXISTS', level) == 0 then
    emptied[#emptied + 1] = p
  end
  for j = 1, #due, 2 do
    local n = unpad(due[j])
    local jk = job_key(k, n)
    local f = read_fields(jk, CLAIM_READ)
    if f.status == 'pending' then
      if fault_of(f) or f.turn then
        return GENERAL
      end
    elseif not KNOWN_STATES[f.status or ''] and redis.call('EXISTS', jk) == 1 then
      return GENERAL -- its status itself is missing or corrupt: jobs_claim.lua fails it
    else
      f = nil -- a stale entry
    end
    picked[#picked + 1] = {level = level, p = p, member = due[j], n = n,
      run_at = tonumber(due[j + 1]), f = f}
  end
end

local out = {''}
-- The rate's starts taken (the bucket moves on), and when it admits again if it cut the room.
local function count_starts(count)
  if rate then
    gate_room_taken(gate, rate, count)
    gate_commit(gate)
    if gate.next_open then
      out[1] = fmt(gate.next_open - now)
    end
  end
end
if #picked == 0 then
  for _, p in ipairs(emptied) do
    redis.call('ZREM', k.prios, p)
  end
  count_starts(0)
  return out
end
local members, numbers, seen = {}, {}, {}
for _, c in ipairs(picked) do
  if not members[c.level] then
    members[c.level] = {}
    seen[#seen + 1] = c
  end
  table.insert(members[c.level], c.member)
  numbers[#numbers + 1] = c.n
end
for _, c in ipairs(seen) do
  redis.call('ZREM', c.level, unpack(members[c.level]))
  if redis.call('EXISTS', c.level) == 0 then
    emptied[#emptied + 1] = c.p
  end
end
redis.call('ZREM', k.pending, unpack(numbers))
for _, p in ipairs(emptied) do
  redis.call('ZREM', k.prios, p)
end
local claims = {}
for _, c in ipairs(picked) do
  if c.f then
    local expires = claim_job(job_key(k, c.n), c.n, c.f, now, ARGV[3], ARGV[4], '', out, 1,
      c.run_at)
    claims[#claims + 1] = expires
    claims[#claims + 1] = c.n
  end
end
if #claims > 0 then
  redis.call('ZADD', k.claims, unpack(claims))
end
count_starts(#claims / 2)
return out
