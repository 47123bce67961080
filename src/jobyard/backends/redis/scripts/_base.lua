-- _base.lua: what every job script shares, prepended to each of them: the general ones get
-- _lib.lua, _flows.lua and _gate.lua after it, the lean ones (jobs_insert_one.lua,
-- jobs_claim_one.lua) little or nothing more, since a script pays for every helper it carries
-- on each call. Not an operation of its own.
--
-- A queue's keys arrive as a group of 16 KEYS, in the order of keys.QUEUE_KEY_SUFFIXES:
--   1 config          hash: the queue's settings (queues_configure)
--   2 prios           zset: priority levels that may hold pending jobs (score = priority)
--   3 claims          zset: running job numbers, score = lease expiry (the watchdog's set)
--   4 pending         zset: pending job numbers, score = number (listing, counting)
--   5 completed       zset: completed job numbers, score = number
--   6 failed          zset: failed job numbers, score = number
--   7 cancelled       zset: cancelled job numbers, score = number
--   8 done:completed  zset: completed job numbers, score = finished_at (purge, retention)
--   9 done:failed     zset: failed job numbers, score = finished_at
--  10 done:cancelled  zset: cancelled job numbers, score = finished_at
--  11 idem            hash: idempotency key -> number of the pending or running job holding it
--  12 ttl             string: the queue's time to live in ms, when it was fed with one
--  13 alive           string: expires ttl ms after the last push; gone = the queue lapsed
--  14 waiting         zset: workflow steps waiting for their inputs, score = number
--  15 owed            set: Cluster only: completed job numbers whose release of a dependent in
--                     another queue is still to be paid (jobs_ack, then leases_reap if need be)
--  16 workflows       hash: job number -> workflow id (jobs of a workflow only)
--
-- Keys built inside a script -- a job's hash "<base>job:<n>" and a priority level's ready set
-- "<base>ready:<p>" (score = run_at, member = the zero-padded number, so equal run_at values
-- fall back to enqueue order) -- carry the same hash tag "{prefix:queue}" as the declared keys,
-- so on Redis Cluster they live on the declared keys' slot and the script stays on one node.
-- So do "<base>wf:<workflow id>" (zset, score = number: a workflow's jobs in this queue),
-- "<base>inputs:<n>" (set, Cluster only: the input ids already counted for waiting job n), and
-- the keys of batches written in several calls (see "Staged batches" in _lib.lua): "<base>stages"
-- (hash: batch id -> "lo hi", the job numbers every reader hides until the batch is
-- published), "<base>stage:<b>" (hash: state "open" or "aborted", and a field "level:<p>" per
-- priority level the stage holds), "<base>stage:<b>:ready:<p>" (zset: the stage's ready
-- entries, as a ready level holds them) and "<base>ready:<p>@<b>" (a published stage's ready
-- entries while they are merged into level <p>: a segment, listed in prios as "<p>@<b>" with
-- score p).
-- A lean script declares one key of a queue (its config) and builds the others from it
-- (keys_at): they carry its hash tag. One exception, single node only: jobs_ack.lua releases a
-- dependent in a queue it was not given by building that queue's keys from their names
-- (keys_at), which a single node allows.
--
-- Times are epoch seconds as doubles. Numbers handed to redis.call are formatted by Redis
-- exactly (17 significant digits); tostring() would round to 14, so floats go back to the
-- client through fmt().

local NQ = 16
local SUFFIXES = {'config', 'prios', 'claims', 'pending', 'completed', 'failed', 'cancelled',
  'done:completed', 'done:failed', 'done:cancelled', 'idem', 'ttl', 'alive', 'waiting', 'owed',
  'workflows'}

local function now_from(arg)
  if arg ~= nil and arg ~= '' then
    return tonumber(arg)
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end

local function fmt(x)
  return string.format('%.17g', x)
end

local function int(x)
  return string.format('%d', x)
end

-- cjson decodes JSON null to a sentinel, never to nil
local function nz(v)
  if v == nil or v == cjson.null then
    return nil
  end
  return v
end

-- The keys of a queue as a table, from their 16 names in QUEUE_KEY_SUFFIXES order.
local function keys_table(name)
  local k = {
    config = name(1), prios = name(2), claims = name(3), pending = name(4),
    completed = name(5), failed = name(6), cancelled = name(7),
    done_completed = name(8), done_failed = name(9), done_cancelled = name(10),
    idem = name(11), ttl = name(12), alive = name(13), waiting = name(14), owed = name(15),
    workflows = name(16),
  }
  k.base = string.sub(k.config, 1, -7) -- strip "config": "{prefix:queue}:"
  k.running = k.claims
  k.held = k.base .. 'held' -- zset: completed jobs a workflow step still needs (see _flows.lua)
  k.stages = k.base .. 'stages'
  return k
end

local function queue_keys(g)
  local b = (g - 1) * NQ
  return keys_table(function(i) return KEYS[b + i] end)
end

-- The keys of a queue by its base "{prefix:queue}:" (single node only: see the top).
local function keys_at(base)
  return keys_table(function(i) return base .. SUFFIXES[i] end)
end

local function job_key(k, n)
  return k.base .. 'job:' .. n
end

local function pad(n)
  return string.rep('0', 20 - #n) .. n
end

local function unpad(m)
  return (string.gsub(m, '^0+', ''))
end

-- Wake waiting workers: a few tokens on the queue's wake list (BLPOP), trimmed so that an
-- unattended list stays small. One token per created job, up to 16, wakes that many workers.
local function wake(key, count)
  if count <= 0 then
    return
  end
  local tokens = {}
  for i = 1, math.min(count, 16) do
    tokens[i] = '1'
  end
  if redis.call('LPUSH', key, unpack(tokens)) > 16 then
    redis.call('LTRIM', key, 0, 15)
  end
end

-- A new job's hash fields from its insert row (as jobs_insert.lua's ARGV[8] describes rows), the
-- queue's max_attempts and backoff (strings from its config, or nil) where the row sets none.
-- attempts (0) and delivery (at_least_once) are left out while they hold their default; status
-- stays the 6th field. Returns the fields, the priority (an integer string) and the run_at.
local function new_fields(job, status, now, q_attempts, q_backoff, default_attempts)
  local prio = int(job[4])
  local run_at = nz(job[6]) or (now + job[5])
  local fields = {
    'name', job[2], 'payload', job[3], 'status', status, 'priority', prio,
    'max_attempts', nz(job[7]) or tonumber(q_attempts) or default_attempts,
    'run_at', run_at, 'created_at', now, 'lease', job[10],
  }
  local function add(field, value)
    if value then
      fields[#fields + 1] = field
      fields[#fields + 1] = value
    end
  end
  if job[11] ~= 'at_least_once' then
    add('delivery', job[11])
  end
  add('backoff', nz(job[8]) or q_backoff)
  add('timeout', nz(job[9]))
  add('idempotency_key', nz(job[12]))
  add('parent_id', nz(job[13]))
  add('key', nz(job[18]))
  return fields, prio, run_at
end

-- Whether `adding` new jobs would take queue k past its max_pending (the config's string, nil:
-- no cap). A waiting step counts with the pending jobs (it will run in this queue), so its
-- release to pending later never needs the room checked again.
local function over_cap(k, max_pending, adding)
  local cap = tonumber(max_pending)
  return cap ~= nil and adding > 0
    and redis.call('ZCARD', k.pending) + redis.call('ZCARD', k.waiting) + adding > cap
end

-- A job hash is only trusted once checked: something other than jobyard may have written it
-- (HDEL, HSET by hand, a half-restored backup). fault(jk) is nil for a sound record, else the
-- reason, e.g. "field lease missing"; the scripts then fail that job alone (fail_corrupt)
-- instead of erroring half-way through a batch. Bounds match the ones enforced at enqueue.
local MAX_PRIORITY = 2147483647
local DELIVERIES = {at_least_once = true, at_most_once = true}
local KNOWN_STATES = {waiting = true, pending = true, running = true, completed = true,
  failed = true, cancelled = true}

local function finite(x)
  return x ~= nil and x == x and x ~= math.huge and x ~= -math.huge
end

local function check_number(h, field, required, integer, lo, hi)
  local v = h[field]
  if v == nil or v == false then
    if required then
      return 'field ' .. field .. ' missing'
    end
    return nil
  end
  local x = tonumber(v)
  if not finite(x) or (integer and math.floor(x) ~= x) then
    return 'field ' .. field .. ' is not ' .. (integer and 'an integer' or 'a number')
      .. ': ' .. string.format('%q', string.sub(v, 1, 40))
  end
  if (lo and x < lo) or (hi and x > hi) then
    return 'field ' .. field .. ' out of range: ' .. string.sub(v, 1, 40)
  end
  return nil
end

local FIELDS = {'status', 'name', 'payload', 'priority', 'attempts', 'max_attempts', 'lease',
  'timeout', 'run_at', 'delivery'}

-- Read the fields `names` of hash jk into a table keyed by name (a missing field: absent).
local function read_fields(jk, names)
  local v = redis.call('HMGET', jk, unpack(names))
  local h = {}
  for i, f in ipairs(names) do
    h[f] = v[i]
  end
  return h
end

-- The reason record h (a table of at least the FIELDS) is corrupt, or nil.
local function fault_of(h)
  if not h.status then
    return 'field status missing'
  end
  if not KNOWN_STATES[h.status] then
    return 'field status is not a status: ' .. string.format('%q', string.sub(h.status, 1, 40))
  end
  for _, f in ipairs({'name', 'payload'}) do
    if not h[f] then
      return 'field ' .. f .. ' missing'
    end
  end
  if h.delivery and not DELIVERIES[h.delivery] then
    return 'field delivery is not a delivery: ' .. string.format('%q', string.sub(h.delivery, 1, 40))
  end
  return check_number(h, 'priority', true, true, -MAX_PRIORITY - 1, MAX_PRIORITY)
    or check_number(h, 'attempts', false, true, 0, MAX_PRIORITY)
    or check_number(h, 'max_attempts', true, true, 1, MAX_PRIORITY)
    or check_number(h, 'lease', true, false, 1e-9, nil)
    or check_number(h, 'timeout', false, false, 1e-9, nil)
    or check_number(h, 'run_at', true, false, nil, nil)
end

local function fault(jk)
  return fault_of(read_fields(jk, FIELDS))
end

-- What a claim reads of a due job, in one HMGET: its reply's fields, its limit key and fair
-- turn, and what fault_of checks.
local CLAIM_READ = {'backoff', 'parent_id', 'key', 'turn'}
for i, f in ipairs(FIELDS) do
  CLAIM_READ[4 + i] = f
end

-- Claim pending job n (hash jk; f: its CLAIM_READ fields, sound) for `worker`: running, one more
-- attempt, started now, a fresh fencing token ("<prefix>.<n>") and lease; `mark` (a job with a
-- limit key): the key slots it took, which leaving running gives back. Appends the 13 strings
-- of its reply to out (g: its group; run_at: its ready entry's score). Returns the lease's
-- expiry (its score in the claims set).
local function claim_job(jk, n, f, now, worker, prefix, mark, out, g, run_at)
  local attempts = (tonumber(f.attempts) or 0) + 1
  local lease = tonumber(f.lease)
  local token = prefix .. '.' .. n
  local expires = now + lease
  if f.key then
    redis.call('HSET', jk, 'status', 'running', 'attempts', attempts, 'started_at', now,
      'worker_id', worker, 'token', token, 'lease_expires_at', expires, 'slots', mark)
  else
    redis.call('HSET', jk, 'status', 'running', 'attempts', attempts, 'started_at', now,
      'worker_id', worker, 'token', token, 'lease_expires_at', expires)
  end
  local i = #out
  out[i + 1] = tostring(g)
  out[i + 2] = n
  out[i + 3] = f.name
  out[i + 4] = f.payload
  out[i + 5] = int(attempts)
  out[i + 6] = int(tonumber(f.max_attempts))
  out[i + 7] = f.backoff or ''
  out[i + 8] = f.timeout and fmt(tonumber(f.timeout)) or ''
  out[i + 9] = fmt(lease)
  out[i + 10] = token
  out[i + 11] = f.delivery or 'at_least_once'
  out[i + 12] = f.parent_id or ''
  out[i + 13] = fmt(run_at)
  return expires
end
