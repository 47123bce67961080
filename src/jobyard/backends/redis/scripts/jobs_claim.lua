-- jobs_claim.lua: claim up to a limit of due jobs from one or more queues (or only peek at them).
--
-- KEYS: the 16 keys of each queue group (see _base.lua).
-- ARGV: [1] now, "" = Redis TIME   [2] number of groups   [3] limit   [4] worker id
--       [5] token prefix (random, fresh per call; the token is "<prefix>.<number>")
--       [6] "1" = peek: report the candidates, claim nothing
--       [7] seconds a failed job is kept (0: forever): a corrupt record fails instead
-- Touches: per group the ready levels (and their segments, see jobs_publish.lua), prios, pending
--          and claims sets and the claimed job hashes
--          (status running, attempts + 1, started_at, worker_id, token, lease_expires_at);
--          a due job whose record is corrupt (see fault() in _base.lua) is failed with the
--          reason instead, and the others of the batch are claimed as usual.
--          Through the gate (_gate.lua): the rate buckets of the starts made (tat strings with
--          a TTL), each keyed job's key slots (keyrun), a fair queue's turns and turn hash.
-- Returns: first next_open: the seconds until a rate that held a due job back admits a start,
--          "" when none did; then, claim: 13 strings per job: group, number, name, payload,
--          attempts, max_attempts, backoff, timeout, lease, token, delivery, parent_id ("" for
--          none), run_at; peek: 4 strings per candidate: group, priority, run_at, number.
--
-- Order: priority DESC, run_at ASC (a fair queue: turn ASC first), enqueue order ASC, across
-- every group. Every due job passes the gate (_gate.lua: paused, max_concurrency, rates, key
-- slots and key rates of the queue and of the job's name) or is skipped, left pending.

local now = now_from(ARGV[1])
local ng = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local worker = ARGV[4]
local prefix = ARGV[5]
local peek = ARGV[6] == '1'
local failed_ttl = tonumber(ARGV[7]) or 0

-- Claim order: priority DESC, run_at ASC, enqueue order ASC (a fair queue: turns first, see
-- fair_due; its own order is kept when groups are merged).
local function better(a, b)
  if a.prio ~= b.prio then
    return a.prio > b.prio
  end
  if a.run_at ~= b.run_at then
    return a.run_at < b.run_at
  end
  return a.member < b.member -- zero-padded numbers: string order is enqueue order
end

-- Due jobs a limited queue's claim looks at, at most (the gate may hold many back): a job
-- behind more held-back ones than this waits for a later claim.
local SCAN_MAX = 512
-- Jobs of a fair queue's level that became due (see "Fair turns" in _lib.lua) given their
-- turn per claim, at most, beyond the claim's own limit (so that a claim behind a staged batch
-- still comes back full: a worker whose claim is short waits for a push or a poll).
local LATE_TURNS = 64

-- A fair queue's due entries of one priority band (its level keys: the level and its
-- segments), in turn order, up to `want`.
local function fair_due(k, band, prio, want)
  local turns, waiting = turns_key(k, int(prio)), unturned_key(k, int(prio))
  local late = redis.call('ZRANGEBYSCORE', waiting, '-inf', now, 'LIMIT', 0, want + LATE_TURNS)
  local low
  for _, m in ipairs(late) do
    redis.call('ZREM', waiting, m)
    local n = unpad(m)
    local jk = job_key(k, n)
    local f = redis.call('HMGET', jk, 'status', 'key')
    if f[1] == 'pending' then
      low = low or lowest_turn(k)
      take_turn(k, jk, n, int(prio), f[2] or nil, low)
    end
  end
  local out = {}
  local from = 0
  while #out < want and from < want + SCAN_MAX do
    local page = redis.call('ZRANGE', turns, from, from + want - 1)
    if #page == 0 then
      break
    end
    for _, m in ipairs(page) do
      local at, where
      for _, p in ipairs(band) do
        at = redis.call('ZSCORE', k.base .. 'ready:' .. p, m)
        if at then
          where = p
          break
        end
      end
      if not at then
        if not staged(k, unpad(m)) then -- a staged job is ready once its batch is published
          redis.call('ZREM', turns, m) -- no longer ready (a stale entry)
          from = from - 1
        end
      elseif tonumber(at) <= now then
        out[#out + 1] = {prio = prio, p = where, run_at = tonumber(at), member = m}
      end
    end
    from = from + #page
  end
  return out
end

-- The due jobs of group g the gate lets through, in claim order, up to the gate's room.
local function scan(g, k, gate)
  local mine = {}
  if gate.room <= 0 then
    return mine
  end
  local bands = {}
  local levels = redis.call('ZREVRANGE', k.prios, 0, -1, 'WITHSCORES')
  for i = 1, #levels, 2 do
    local prio = tonumber(levels[i + 1])
    if #bands == 0 or bands[#bands].prio ~= prio then
      bands[#bands + 1] = {prio = prio}
    end
    table.insert(bands[#bands], levels[i])
  end
  local scanned = 0
  -- An open gate takes every due job it meets: it scans no more than it takes.
  local budget = gate.open and math.huge or SCAN_MAX
  for _, band in ipairs(bands) do
    if #mine >= gate.room or scanned >= budget then
      break
    end
    -- Without limits every due job passes: ask each level for what is left, as ever. Through a
    -- closed gate a level of its own is read in pages of twice what is left to take (most due
    -- jobs pass), so a claim of 128 does not read and sort 512 entries to take the first 128.
    local paged = not gate.open and not gate.fair and #band == 1
    local offset = 0
    repeat
      local want = gate.open and (gate.room - #mine) or (SCAN_MAX - scanned)
      if paged then
        want = math.min(want, math.max(2 * (gate.room - #mine), 32))
      end
      local entries
      if gate.fair then
        entries = fair_due(k, band, band.prio, want)
      else
        -- A level may have segments beside it (a published batch's entries being merged into
        -- it, see jobs_publish.lua), members "<p>@<batch>" of prios with the same score: each
        -- key of one priority may hold the best entries, so each is asked, then sorted.
        entries = {}
        for _, p in ipairs(band) do
          local level = k.base .. 'ready:' .. p
          local due = redis.call('ZRANGEBYSCORE', level, '-inf', now, 'WITHSCORES', 'LIMIT',
            offset, want)
          if #due == 0 and offset == 0 and redis.call('EXISTS', level) == 0 then
            redis.call('ZREM', k.prios, p) -- an emptied level
          end
          for j = 1, #due, 2 do
            entries[#entries + 1] = {prio = band.prio, p = p, run_at = tonumber(due[j + 1]),
              member = due[j]}
          end
        end
        if #band > 1 then
          table.sort(entries, better)
        end
      end
      for _, e in ipairs(entries) do
        if #mine >= gate.room or scanned >= budget then
          break
        end
        scanned = scanned + 1
        local scopes = {}
        if gate.rate_only then
          scopes = gate_pass(gate, nil, nil) -- only the queue's rate: name and key change nothing
        elseif not gate.open then
          -- The claim's own read of the job (kept for it below): its name and key for the gate.
          local f = read_fields(job_key(k, unpad(e.member)), CLAIM_READ)
          e.f = f
          scopes = gate_pass(gate, f.name, f.key)
        end
        if scopes then
          e.g, e.scopes = g, scopes
          mine[#mine + 1] = e
        elseif gate_closed(gate) then
          return mine -- the queue's own rate admits no more: nothing behind can start
        end
      end
      offset = offset + #entries
    until not paged or #entries < want or #mine >= gate.room or scanned >= budget
  end
  return mine
end

local lists, gates, groups = {}, {}, {}
for g = 1, ng do
  local k = queue_keys(g)
  groups[g] = k
  local lapsed = lapse_if_due(k) -- -1: lapsed with workflow jobs, left to jobs_expire
  gates[g] = gate_open(k, now, limit)
  lists[g] = lapsed >= 0 and scan(g, k, gates[g]) or {}
end

-- Merge the groups' lists, each in its own order, by their heads.
local candidates = {}
local at = {}
for g = 1, ng do
  at[g] = 1
end
while #candidates < limit do
  local best
  for g = 1, ng do
    local head = lists[g][at[g]]
    if head and (not best or better(head, lists[best][at[best]])) then
      best = g
    end
  end
  if not best then
    break
  end
  candidates[#candidates + 1] = lists[best][at[best]]
  at[best] = at[best] + 1
end

local next_open
for g = 1, ng do
  local o = gates[g].next_open
  if o and (not next_open or o < next_open) then
    next_open = o
  end
end
local out = {next_open and fmt(next_open - now) or ''}
local chosen = #candidates
if peek then
  for i = 1, chosen do
    local c = candidates[i]
    out[#out + 1] = tostring(c.g)
    out[#out + 1] = int(c.prio)
    out[#out + 1] = fmt(c.run_at)
    out[#out + 1] = unpad(c.member)
  end
  return out
end

-- Every chosen entry leaves its ready level and pending at once (what from_ready does, one call
-- per set), a stale one (its job no longer pending) too; a level left empty leaves prios.
local drop, levels = new_batch(), {}
for i = 1, chosen do
  local c = candidates[i]
  local k = groups[c.g]
  local level = k.base .. 'ready:' .. c.p
  c.n = unpad(c.member)
  batch_add(drop, 'ZREM', level, c.member)
  batch_add(drop, 'ZREM', k.pending, c.n)
  levels[level] = {k.prios, c.p}
end
batch_send(drop)
for level, at in pairs(levels) do
  if redis.call('EXISTS', level) == 0 then
    redis.call('ZREM', at[1], at[2])
  end
end

-- One read per job (the gate's, when it read one) serves both the check for a corrupt record
-- (fault_of) and the reply.
local claims = new_batch()
local used = {} -- a fair queue's turns used: group -> key -> the highest turn claimed
for i = 1, chosen do
  local c = candidates[i]
  local k, n = groups[c.g], c.n
  local jk = job_key(k, n)
  local f = c.f or read_fields(jk, CLAIM_READ)
  local bad = fault_of(f)
  if f.status == 'pending' and bad then
    fail_corrupt(k, jk, n, now, bad, failed_ttl)
  elseif f.status == 'pending' then -- anything else is a stale index entry: dropped above
    -- the key slots it takes (counted by gate_take, written by gate_commit): its queue's and
    -- its name's scopes that have a key_concurrency
    local mark = ''
    if f.key then
      local gate, own = gates[c.g], job_limits(gates[c.g], f.name)
      mark = (gate.q.kc and 'q' or '') .. (own and own.kc and 'j' or '')
    end
    local expires = claim_job(jk, n, f, now, worker, prefix, mark, out, c.g, c.run_at)
    batch_add(claims, 'ZADD', k.claims, expires, n)
    gate_take(c.scopes)
    if f.turn then -- a fair queue's turn is used (the key's latest, if it was: see below)
      batch_add(claims, 'ZREM', turns_key(k, int(c.prio)), c.member)
      local mine = used[c.g] or {}
      used[c.g] = mine
      local key, turn = f.key or '', tonumber(f.turn)
      if not mine[key] or mine[key] < turn then
        mine[key] = turn
      end
    end
  elseif not KNOWN_STATES[f.status or ''] and redis.call('EXISTS', jk) == 1 then
    fail_corrupt(k, jk, n, now, bad, failed_ttl) -- its status itself is missing or corrupt
  end
end
batch_send(claims)
-- A key whose latest turn was used has none now (its next job takes a new one): one read of
-- the keys' latest turns per queue, one delete of those used.
for g, mine in pairs(used) do
  local latest = groups[g].base .. 'turn'
  local keys = {}
  for key in pairs(mine) do
    keys[#keys + 1] = key
  end
  local have = redis.call('HMGET', latest, unpack(keys))
  local gone = {}
  for i, key in ipairs(keys) do
    if tonumber(have[i]) == mine[key] then
      gone[#gone + 1] = key
    end
  end
  if #gone > 0 then
    redis.call('HDEL', latest, unpack(gone))
  end
end
for g = 1, ng do
  gate_commit(gates[g])
end
return out
