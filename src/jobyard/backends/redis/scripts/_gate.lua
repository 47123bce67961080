-- _gate.lua: the gate of the claim (flow control), prepended to every job script after _lib.lua
-- and _flows.lua. jobs_claim.lua asks it about every due job, whether it claims or only peeks
-- (the Cluster claim's probe of several queues): gate_open reads a queue's limits once per
-- call, gate_pass is the one place that decides whether a job may start, and gate_commit
-- counts the starts the claim made. The rules are docs/backend-contract.md's (jobs_claim).
--
-- Per queue, all on the queue's hash slot:
--   config fields paused, max_concurrency, rate_count/rate_per/rate_burst (the queue's rate),
--     key_concurrency, key_rate_count/key_rate_per/key_rate_burst, fair (queues_configure.lua)
--   "<base>joblimits"  hash: job name -> its limits, the seven numbers above joined by commas
--   "<base>tat", "<base>tat:j:<name>", "<base>tat:k:<key>", "<base>tat:jk:<name>\n<key>":
--     the GCRA buckets (a string each: tat, the theoretical arrival time) of the queue's rate, a
--     job name's rate, the queue's key rate of a key and a job name's key rate of a key; each
--     set with a TTL of its remaining time plus a minute, so an idle key's bucket goes away
--   "<base>keyrun"     hash: running jobs per key and scope (see key_slots in _lib.lua)

local GATE_TTL_SLACK_MS = 60000

local function split_commas(text)
  local out, i = {}, 1
  for cell in string.gmatch(text .. ',', '([^,]*),') do
    out[i] = cell ~= '' and cell or false
    i = i + 1
  end
  return out
end

-- {T = seconds between starts, B = burst} from (count, per, burst) strings, or nil.
local function rate_of(count, per, burst)
  if not count then
    return nil
  end
  return {T = tonumber(per) / tonumber(count), B = tonumber(burst)}
end

local function limits_of(c) -- c: the seven cells, false or nil when unset
  return {
    rate = rate_of(c[1], c[2], c[3]),
    kc = c[4] and tonumber(c[4]),
    key_rate = rate_of(c[5], c[6], c[7]),
  }
end

-- The gate of queue k for one call: paused, max_concurrency (room: how many of `limit` the
-- queue may start at most) and its limits; job names' limits are read as their jobs come up.
local function gate_open(k, now, limit)
  local conf = redis.call('HMGET', k.config, 'paused', 'max_concurrency', 'rate_count',
    'rate_per', 'rate_burst', 'key_concurrency', 'key_rate_count', 'key_rate_per',
    'key_rate_burst', 'fair')
  local room = limit
  if conf[1] == '1' then
    room = 0
  elseif conf[2] then
    room = math.min(room, tonumber(conf[2]) - redis.call('ZCARD', k.claims))
  end
  local q = limits_of({conf[3], conf[4], conf[5], conf[6], conf[7], conf[8], conf[9]})
  local named = redis.call('EXISTS', k.base .. 'joblimits') == 1
  return {
    k = k, now = now, room = room, q = q, fair = conf[10] == '1',
    named = named, jobs = {}, buckets = {}, slots = {}, next_open = nil,
    -- nothing but room to check: every due job passes (the claim reads no job hash for it)
    open = not (q.rate or q.kc or q.key_rate or named),
    -- the queue's own rate alone: a job's name and key change nothing (see gate_room)
    rate_only = q.rate ~= nil and not (q.kc or q.key_rate or named),
  }
end

local function job_limits(g, name)
  local got = g.jobs[name]
  if got == nil then
    got = false
    if g.named then
      local text = redis.call('HGET', g.k.base .. 'joblimits', name)
      if text then
        got = limits_of(split_commas(text))
      end
    end
    g.jobs[name] = got
  end
  return got
end

local function bucket(g, key, rate)
  local b = g.buckets[key]
  if not b then
    local tat = tonumber(redis.call('GET', key))
    local s = g.now
    if tat and tat > s then
      s = tat
    end
    b = {key = key, rate = rate, s = s, used = 0, taken = 0,
      allow = math.max(0, math.floor((g.now - s) / rate.T + rate.B + 1e-9))}
    g.buckets[key] = b
  end
  return b
end

local function slot(g, field, cap)
  local sl = g.slots[field]
  if not sl then
    local held = tonumber(redis.call('HGET', g.k.base .. 'keyrun', field)) or 0
    sl = {field = field, cap = cap, held = held, used = held, taken = 0}
    g.slots[field] = sl
  end
  return sl
end

-- Whether a due job named `name` with limit key `key` (nil: none) may start now, counting the
-- jobs this call let through before it. Returns the scopes it counts against (a table: pass
-- it to gate_commit when the job is claimed), or nil: held back, untouched. A job held back by
-- a rate moves g.next_open to when that rate admits a start again.
local function gate_pass(g, name, key)
  local base = g.k.base
  local rates, slots = {}, {}
  local function scope(limits, tat_key, slot_field, key_tat)
    if limits.rate then
      rates[#rates + 1] = bucket(g, tat_key, limits.rate)
    end
    if key and limits.kc then
      slots[#slots + 1] = slot(g, slot_field, limits.kc)
    end
    if key and limits.key_rate then
      rates[#rates + 1] = bucket(g, key_tat, limits.key_rate)
    end
  end
  scope(g.q, base .. 'tat', key and ('q\n' .. key), key and (base .. 'tat:k:' .. key))
  local own = name and job_limits(g, name)
  if own then
    local nk = key and (name .. '\n' .. key)
    scope(own, base .. 'tat:j:' .. name, key and ('j\n' .. nk), key and (base .. 'tat:jk:' .. nk))
  end
  for _, sl in ipairs(slots) do
    if sl.used >= sl.cap then
      return nil
    end
  end
  for _, b in ipairs(rates) do
    if b.used >= b.allow then
      local tat = b.s + b.used * b.rate.T
      local at = math.max(g.now, tat - (b.rate.B - 1) * b.rate.T)
      if not g.next_open or at < g.next_open then
        g.next_open = at
      end
      return nil
    end
  end
  for _, sl in ipairs(slots) do
    sl.used = sl.used + 1
  end
  for _, b in ipairs(rates) do
    b.used = b.used + 1
  end
  rates.slots = slots
  return rates
end

-- Whether no job of the queue can start any more in this call: its own rate is spent.
local function gate_closed(g)
  if not g.q.rate then
    return false
  end
  local b = g.buckets[g.k.base .. 'tat']
  return b ~= nil and b.used >= b.allow
end

-- The claim took a job gate_pass let through (`scopes`, its answer): count its start, in its
-- buckets and its key slots.
local function gate_take(scopes)
  for _, b in ipairs(scopes) do
    b.taken = b.taken + 1
  end
  for _, sl in ipairs(scopes.slots or {}) do
    sl.taken = sl.taken + 1
  end
end

-- The queue's own rate alone (g.rate_only): no job's name or key matters, so the claim reads no
-- job hash for the gate and takes at most what the bucket admits (gate_room_taken counts them).
local function gate_room(g)
  local b = bucket(g, g.k.base .. 'tat', g.q.rate)
  if b.allow < g.room then
    g.room = b.allow
    g.short = b -- the bucket, not the claim's limit, cut the room: see gate_room_taken
  end
  return b
end

-- `count` starts taken under gate_room's bucket; when the bucket cut the room and every start it
-- admitted was taken, a due job may be held back: next_open is when the bucket admits again.
local function gate_room_taken(g, b, count)
  b.used, b.taken = count, count
  if g.short and count >= b.allow then
    g.next_open = math.max(g.now, b.s + b.allow * b.rate.T - (b.rate.B - 1) * b.rate.T)
  end
end

-- Write the buckets and key slots of the starts taken (gate_take): one SET per bucket, one HSET
-- for every key slot (its count when the call began, plus the starts taken).
local function gate_commit(g)
  for _, b in pairs(g.buckets) do
    if b.taken > 0 then
      local tat = b.s + b.taken * b.rate.T
      local ttl = math.ceil((tat - g.now) * 1000) + GATE_TTL_SLACK_MS
      redis.call('SET', b.key, fmt(tat), 'PX', ttl)
    end
  end
  local counts = {}
  for _, sl in pairs(g.slots) do
    if sl.taken > 0 then
      counts[#counts + 1] = sl.field
      counts[#counts + 1] = sl.held + sl.taken
    end
  end
  if #counts > 0 then
    redis.call('HSET', g.k.base .. 'keyrun', unpack(counts))
  end
end
