-- _lib.lua: helpers prepended to every jobyard job script (after _base.lua). Not an operation of
-- its own.
--
-- The keys of a queue, the helpers every job script shares and the check of a job record are in
-- _base.lua, prepended before this file.

-- Writes gathered over a batch of jobs and sent as one call per command, key and chunk (a
-- batch of hundreds of jobs pays a few calls for its index entries, not a few per job). Sent in
-- the order each command and key was first added: never batch a ZADD and a ZREM of one key.
local function new_batch()
  return {by = {}, order = {}}
end

local function batch_add(b, cmd, key, a, c)
  local id = cmd .. ' ' .. key
  local t = b.by[id]
  if not t then
    t = {cmd = cmd, key = key}
    b.by[id] = t
    b.order[#b.order + 1] = t
  end
  t[#t + 1] = a
  if c ~= nil then
    t[#t + 1] = c
  end
end

local function batch_send(b)
  for _, t in ipairs(b.order) do
    for i = 1, #t, 2000 do -- unpack() is bounded by the Lua C stack (8000 slots); 2000 is even
      redis.call(t.cmd, t.key, unpack(t, i, math.min(i + 1999, #t)))
    end
  end
  b.by, b.order = {}, {}
end

-- Fair turns (a queue configured fair): each due pending job of the queue has a turn, kept in
-- its hash ("turn"), and a round, its score in the zset "<base>turns:<p>" of its priority level
-- (member = the zero-padded number, so a round's jobs fall back to enqueue order); the claim of
-- a fair queue reads a level in round order (fair_due in jobs_claim.lua). A job's turn is one
-- more than the latest turn given to its key (the hash "<base>turn": key -> that turn; jobs
-- without a key share the key ""), never less than the first turn of the queue's lowest
-- pending round: start-time fair queueing, so a key that arrives behind another's backlog is
-- served from the round being served on. A key's FAIR_TURN consecutive turns make one round
-- (base.FAIR_TURN: round = (turn - 1) // FAIR_TURN, turns from 1), so a claim takes a few jobs
-- of each key at a time, as the SQL stores do. The entry of a key whose latest job is claimed
-- is deleted: idle keys leave nothing behind.
-- A job that is not due when it becomes pending (delayed, retried, released by its inputs)
-- waits in "<base>unturned:<p>" (score = run_at) and takes its turn when a claim finds it due,
-- so jobs not due never stand in the turns ahead of due ones. A due job of a staged batch takes
-- its turn as it is staged; the claim passes over it until the batch is published.
local FAIR_TURN = 4

local function turns_key(k, prio)
  return k.base .. 'turns:' .. prio
end

local function unturned_key(k, prio)
  return k.base .. 'unturned:' .. prio
end

-- The first turn of the queue's lowest pending round (1 when none is pending).
local function lowest_turn(k)
  local low
  for _, p in ipairs(redis.call('ZRANGE', k.prios, 0, -1)) do
    if tonumber(p) then
      local first = redis.call('ZRANGE', turns_key(k, p), 0, 0, 'WITHSCORES')
      if first[2] and (not low or tonumber(first[2]) < low) then
        low = tonumber(first[2])
      end
    end
  end
  return (low or 0) * FAIR_TURN + 1
end

-- A turn for job n (priority prio, limit key `key` or nil) of a fair queue; `low`: the first
-- turn of the queue's lowest pending round (lowest_turn), read once per batch.
local function take_turn(k, jk, n, prio, key, low)
  local field = key or ''
  local last = tonumber(redis.call('HGET', k.base .. 'turn', field))
  local t = low
  if last and last + 1 > t then
    t = last + 1
  end
  redis.call('HSET', k.base .. 'turn', field, t)
  redis.call('HSET', jk, 'turn', t)
  redis.call('ZADD', turns_key(k, prio), math.floor((t - 1) / FAIR_TURN), pad(n))
  return t
end

-- A pending job is findable by the claim (its priority level, by run_at) and by listing; in a
-- fair queue it waits for its turn (see above).
local function to_ready(k, n, prio, run_at)
  redis.call('ZADD', k.base .. 'ready:' .. prio, run_at, pad(n))
  redis.call('ZADD', k.prios, prio, prio)
  redis.call('ZADD', k.pending, n, n)
  if tonumber(prio) and redis.call('HGET', k.config, 'fair') == '1' then
    redis.call('ZADD', unturned_key(k, prio), run_at, pad(n))
  end
end

-- Key slots (key_concurrency): the running jobs of each key, counted in the hash
-- "<base>keyrun", field "q\n<key>" for the queue's scope and "j\n<name>\n<key>" for a job
-- name's (job names hold no newline). A keyed job claimed while its scope has a
-- key_concurrency counts from its claim until it leaves running (jobs_ack, leases_reap, a
-- corrupt record failed); the scopes it counts in are kept in its hash ("slots": "q", "j" or
-- "qj"), so leaving takes off exactly what the claim added. A count that reaches 0 is deleted.
-- (A key_concurrency newly declared does not count the jobs of its key already running.)
local function key_slots(k, name, key, by, mark)
  local run = k.base .. 'keyrun'
  local fields = {}
  if string.find(mark, 'q', 1, true) then
    fields[#fields + 1] = 'q\n' .. key
  end
  if string.find(mark, 'j', 1, true) then
    fields[#fields + 1] = 'j\n' .. (name or '') .. '\n' .. key
  end
  for _, f in ipairs(fields) do
    if redis.call('HINCRBY', run, f, by) <= 0 then
      redis.call('HDEL', run, f)
    end
  end
end

-- A job leaves running: the key slots its claim took (its "slots" mark) are free again.
local function leave_running(k, jk, name, key, mark)
  if key and mark and mark ~= '' then
    key_slots(k, name, key, -1, mark)
  end
end

-- The same for a batch of jobs (jobs_ack.lua): `freed` (hash key -> field -> slots) gathers what
-- each job gives back, and slots_free writes it all at once: one read and at most one delete
-- and one write per hash instead of two calls a job.
local function leave_running_later(freed, k, name, key, mark)
  if not (key and mark and mark ~= '') then
    return
  end
  local run = k.base .. 'keyrun'
  local t = freed[run]
  if not t then
    t = {}
    freed[run] = t
  end
  if string.find(mark, 'q', 1, true) then
    local f = 'q\n' .. key
    t[f] = (t[f] or 0) + 1
  end
  if string.find(mark, 'j', 1, true) then
    local f = 'j\n' .. (name or '') .. '\n' .. key
    t[f] = (t[f] or 0) + 1
  end
end

local function slots_free(freed)
  for run, t in pairs(freed) do
    local fields = {}
    for f in pairs(t) do
      fields[#fields + 1] = f
    end
    local have = redis.call('HMGET', run, unpack(fields))
    local gone, left = {}, {}
    for i, f in ipairs(fields) do
      local v = (tonumber(have[i]) or 0) - t[f]
      if v <= 0 then
        gone[#gone + 1] = f -- a count that reaches 0 is deleted
      else
        left[#left + 1] = f
        left[#left + 1] = v
      end
    end
    if #gone > 0 then
      redis.call('HDEL', run, unpack(gone))
    end
    if #left > 0 then
      redis.call('HSET', run, unpack(left))
    end
  end
end

local function from_ready(k, n, prio)
  -- a corrupt record may have lost its priority: then its entry is looked for on every level;
  -- else on the level of its priority and that priority's segments (a published stage's
  -- entries not merged yet, see jobs_publish.lua)
  local levels
  if not prio then
    levels = redis.call('ZRANGE', k.prios, 0, -1)
  elseif tonumber(prio) then
    levels = redis.call('ZRANGEBYSCORE', k.prios, prio, prio)
    levels[#levels + 1] = prio
  else
    levels = {prio}
  end
  for _, p in ipairs(levels) do
    local level = k.base .. 'ready:' .. p
    redis.call('ZREM', level, pad(n))
    if redis.call('EXISTS', level) == 0 then
      redis.call('ZREM', k.prios, p)
    end
    if tonumber(p) then
      redis.call('ZREM', turns_key(k, p), pad(n))
      redis.call('ZREM', unturned_key(k, p), pad(n))
    end
  end
  redis.call('ZREM', k.pending, n)
  local t = redis.call('HMGET', k.base .. 'job:' .. n, 'turn', 'key')
  if t[1] then -- a fair queue's job: the key's latest turn, if it was, is forgotten
    local latest = k.base .. 'turn'
    if redis.call('HGET', latest, t[2] or '') == t[1] then
      redis.call('HDEL', latest, t[2] or '')
    end
  end
end

-- An idempotency key is held only while its job is pending or running (seed 001). `key`: the
-- job's key when the caller read it already (false: it has none), else nil.
local function release_idem(k, jk, n, key)
  if key == nil then
    key = redis.call('HGET', jk, 'idempotency_key')
  end
  if key and redis.call('HGET', k.idem, key) == n then
    redis.call('HDEL', k.idem, key)
  end
end

-- Seconds a queue's completed jobs are kept: its own retention, else the store's default.
local function retention_of(k, default)
  return tonumber(redis.call('HGET', k.config, 'retention')) or default
end

-- The throughput history (Backend.throughput_get): a hash per queue and hour,
-- "<base>tp:<hour>" (hour = floor(now / 3600)), with a field per minute and kind,
-- "<minute start>c" (completed) or "<minute start>f" (failed into the dead letter). A key expires
-- TP_KEEP seconds after its hour's first write (a day and two hours: the last day's chart is
-- whole), so nothing has to prune it. A script that finishes many jobs sets TALLY = {} first and
-- calls tally_flush() before it returns: one HINCRBY per queue, minute and kind, not per job.
local TP_KEEP = 93600
local TALLY = nil

local function tp_key(k, now)
  return k.base .. 'tp:' .. int(math.floor(now / 3600))
end

local function tp_add(key, field, n)
  redis.call('HINCRBY', key, field, n)
  redis.call('EXPIRE', key, TP_KEEP, 'NX')
end

local function tally(k, status, now)
  if status ~= 'completed' and status ~= 'failed' then
    return
  end
  local key = tp_key(k, now)
  local field = int(math.floor(now / 60) * 60) .. (status == 'completed' and 'c' or 'f')
  if not TALLY then
    tp_add(key, field, 1)
    return
  end
  local id = key .. ' ' .. field
  local t = TALLY[id]
  if not t then
    t = {key = key, field = field, n = 0}
    TALLY[id] = t
    TALLY[#TALLY + 1] = t
  end
  t.n = t.n + 1
end

local function tally_flush()
  if TALLY then
    for _, t in ipairs(TALLY) do
      tp_add(t.key, t.field, t.n)
    end
    TALLY = {}
  end
end

-- The dead letter's line of an error (base.error_line): the last line with anything but
-- spaces, tabs and carriage returns, without those around it, read from the error's last
-- `tail` bytes (cut at a whole UTF-8 character). By plain scans: a pattern anchored with "$"
-- is tried from every position (0.3 ms a traceback).
local ERROR_TAIL = 1000 -- base.ERROR_TAIL

local function dead_line(err, tail)
  err = err or ''
  if #err > tail then
    err = string.sub(err, -tail)
    err = string.gsub(err, '^[\128-\191]+', '') -- no half of a character
  end
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

-- Into a finished state's indexes; finished job hashes expire after ttl seconds (0: kept),
-- but a failed or cancelled workflow job: its deletion must reach the jobs it is linked to
-- (drop_linked in _flows.lua), which a key TTL would not, so only jobs_expire drops it.
-- With `batch` the index entries join it (the caller sends it); `key` as for release_idem.
-- A failed job keeps its dead-letter line beside its error (field dead_line, set here once,
-- after every caller wrote the error), so the dead letter's grouping reads no traceback.
local function to_finished(k, jk, n, status, now, ttl, batch, key)
  if status == 'failed' then
    redis.call('HSET', jk, 'dead_line', dead_line(redis.call('HGET', jk, 'error'), ERROR_TAIL))
  end
  if batch then
    batch_add(batch, 'ZADD', k[status], n, n)
    batch_add(batch, 'ZADD', k['done_' .. status], now, n)
  else
    redis.call('ZADD', k[status], n, n)
    redis.call('ZADD', k['done_' .. status], now, n)
  end
  release_idem(k, jk, n, key)
  tally(k, status, now)
  if ttl > 0 and (status == 'completed' or redis.call('HEXISTS', jk, 'workflow_id') == 0) then
    redis.call('EXPIRE', jk, ttl)
  end
end

local function from_finished(k, n, status)
  redis.call('ZREM', k[status], n)
  redis.call('ZREM', k['done_' .. status], n)
end

-- A queue fed with a time to live (seed 003's list::Publish ttl) lapses, with the pending jobs
-- it still holds, once nothing was pushed for that long: "alive" expired, "ttl" is still set.
-- A queue holding workflow jobs lapses with its waiting steps too (nothing will run them), and
-- each workflow job dropped takes its waiting steps downstream along and frees its inputs, as
-- a purge does (drop_linked, _flows.lua): only a script that carries a ctx (jobs_expire.lua)
-- does that; the others (a claim, an insert) get -1 for such a queue, and leave it alone.
local function lapse_if_due(k, ctx)
  if redis.call('EXISTS', k.ttl) == 0 or redis.call('EXISTS', k.alive) == 1 then
    return 0
  end
  if redis.call('EXISTS', k.stages) == 1 then
    return 0 -- not while a batch is written into it: its staged jobs are pending already
  end
  local linked = 0
  if redis.call('EXISTS', k.workflows) == 1 then
    if not ctx then
      return -1
    end
    for _, n in ipairs(redis.call('ZRANGE', k.waiting, 0, -1)) do
      ctx.drop_linked(ctx, k, n, 'waiting', true)
    end
    for _, n in ipairs(redis.call('ZRANGE', k.pending, 0, -1)) do
      if redis.call('HEXISTS', job_key(k, n), 'workflow_id') == 1 then
        ctx.drop_linked(ctx, k, n, 'pending', true)
        linked = linked + 1
      end
    end
  end
  local ns = redis.call('ZRANGE', k.pending, 0, -1)
  for _, n in ipairs(ns) do
    local jk = job_key(k, n)
    release_idem(k, jk, n)
    redis.call('DEL', jk)
  end
  for _, p in ipairs(redis.call('ZRANGE', k.prios, 0, -1)) do
    redis.call('DEL', k.base .. 'ready:' .. p, turns_key(k, p), unturned_key(k, p))
  end
  redis.call('DEL', k.prios, k.pending, k.ttl, k.base .. 'turn')
  return #ns + linked
end

-- Workflows ------------------------------------------------------------------------------------
-- A step inserted with inputs is "waiting" (index k.waiting) with fields depends_on (its inputs'
-- ids, comma separated, written once) and waits (inputs not completed yet); each input lists it
-- in dependents. A completion counts one input of each dependent (count_input); the last one
-- moves the step to pending. The counter is one field apart from the id list, so a group of
-- thousands of members costs each completion O(1).

-- Input `input` of waiting job n (keys dk) completed: count it; the last one makes n pending,
-- never before its own run_at. With `input` (Cluster's owed releases, which may be sent more
-- than once) an input is counted only the first time it is added to n's set of counted inputs.
-- A job that is not waiting any more (cancelled, released) is left alone.
-- Returns 1 if n became pending, else 0.
local EARLY_INPUTS_TTL = 7 * 86400 -- seconds inputs counted for a step not written yet are kept

local function count_input(dk, n, now, input)
  local jk = job_key(dk, n)
  local f = redis.call('HMGET', jk, 'status', 'priority', 'run_at')
  local counted = dk.base .. 'inputs:' .. n
  if not f[1] and input then
    -- The step does not exist: purged after a cancel, or (a producer of an earlier version,
    -- which wrote a Cluster workflow queue by queue, unstaged) not written yet. Keep the count
    -- (insert_jobs subtracts it); the set expires if the step never comes. A staged batch
    -- stores every step before any of its inputs can be claimed.
    redis.call('SADD', counted, input)
    redis.call('EXPIRE', counted, EARLY_INPUTS_TTL)
    return 0
  end
  if f[1] ~= 'waiting' then
    return 0
  end
  if input and redis.call('SADD', counted, input) == 0 then
    return 0
  end
  if redis.call('HINCRBY', jk, 'waits', -1) > 0 then
    return 0
  end
  local run_at = math.max(tonumber(f[3]) or now, now)
  redis.call('HDEL', jk, 'waits')
  redis.call('HSET', jk, 'status', 'pending', 'run_at', run_at)
  redis.call('ZREM', dk.waiting, n)
  redis.call('DEL', counted)
  to_ready(dk, n, f[2], run_at)
  return 1
end

-- A waiting job leaves for another state than pending (cancelled): out of the waiting index.
local function from_waiting(k, jk, n)
  redis.call('ZREM', k.waiting, n)
  redis.call('HDEL', jk, 'waits')
  redis.call('DEL', k.base .. 'inputs:' .. n)
end

-- Split "a,b,c" (ids never hold a comma).
local function split_ids(s)
  local out = {}
  if s then
    for id in string.gmatch(s, '[^,]+') do
      out[#out + 1] = id
    end
  end
  return out
end

-- The queue and number of a job id "<queue>:<n>".
local function parse_id(id)
  return string.match(id, '^(.*):(%d+)$')
end

-- Deleting finished (or waiting) job n (purge, retention): its workflow index entry goes too.
-- has_wf: the queue's workflows hash exists (checked once per call, so plain queues pay
-- nothing more).
local function drop_job(k, n, status, has_wf)
  redis.call('DEL', job_key(k, n), k.base .. 'inputs:' .. n, k.base .. 'freed:' .. n)
  if status == 'waiting' then
    redis.call('ZREM', k.waiting, n)
  elseif status == 'pending' then
    redis.call('ZREM', k.pending, n) -- a lapsed queue's (lapse_if_due deletes its ready levels)
  else
    from_finished(k, n, status)
  end
  if status == 'completed' then
    redis.call('ZREM', k.held, n)
  end
  if has_wf then
    local wf = redis.call('HGET', k.workflows, n)
    if wf then
      redis.call('ZREM', k.base .. 'wf:' .. wf, n)
      redis.call('HDEL', k.workflows, n)
    end
  end
end

-- Fail a corrupt job where it stands (pending or running), with the reason as its error.
local function fail_corrupt(k, jk, n, now, reason, ttl)
  if redis.call('ZREM', k.claims, n) == 1 then
    local f = redis.call('HMGET', jk, 'name', 'key', 'slots')
    leave_running(k, jk, f[1], f[2], f[3])
  end
  redis.call('ZREM', k.pending, n)
  redis.call('HDEL', jk, 'token', 'lease_expires_at')
  redis.call('HSET', jk, 'status', 'failed', 'error', 'corrupt job record: ' .. reason,
    'finished_at', now)
  to_finished(k, jk, n, 'failed', now, ttl)
end

local function record(k, n)
  local h = redis.call('HGETALL', job_key(k, n))
  return h
end

-- Staged batches -------------------------------------------------------------------------------
-- A batch too large for one short script (or, on Cluster, one that spans several queues) is
-- written in several calls, a slice each (jobs_stage.lua), and made visible in one move per
-- queue (jobs_publish.lua; a single node publishes every queue in one). Its job numbers
-- [lo, hi] were reserved together (batch_open.lua). While it is staged the queue's stages hash
-- lists that range and every reader hides it: listings and counts leave that range of the
-- number-scored indexes out (pending, waiting, wf:<id>), a read by id finds no job, and the
-- ready entries wait in the stage's own levels, which no claim reads. Publishing renames those
-- into place, or, where the level holds jobs already, into a segment the claim reads beside it
-- (ready_merge.lua moves it into the level afterwards), and drops the range from stages:
-- O(priority levels) whatever the batch's size. A batch abandoned before it was published is
-- deleted by stage_abort.lua (by its producer, or by the reaper once its deadline passed).

-- The ranges {lo, hi} of job numbers the open stages of queue k hide.
local function stage_ranges(k)
  local out = {}
  for _, v in ipairs(redis.call('HVALS', k.stages)) do
    local lo, hi = string.match(v, '^(%d+) (%d+)$')
    if lo then
      out[#out + 1] = {tonumber(lo), tonumber(hi)}
    end
  end
  return out
end

-- Whether job number n falls in one of `ranges`.
local function in_ranges(ranges, n)
  local x = tonumber(n)
  for _, r in ipairs(ranges) do
    if x >= r[1] and x <= r[2] then
      return true
    end
  end
  return false
end

-- Whether job n of queue k belongs to a batch still staged (hidden from every reader).
local function staged(k, n)
  return redis.call('EXISTS', k.stages) == 1 and in_ranges(stage_ranges(k), n)
end

-- The spans of job numbers of queue k that are not hidden, newest first, as score bounds
-- {max, min}: all of them, or the gaps between the ranges of batches still staged (see
-- "Staged batches" in _lib.lua).
local function visible_spans(k)
  if redis.call('EXISTS', k.stages) == 0 then
    return {{'+inf', '-inf'}}
  end
  local ranges = stage_ranges(k)
  table.sort(ranges, function(a, b) return a[1] > b[1] end)
  local spans, top = {}, '+inf'
  for _, r in ipairs(ranges) do
    spans[#spans + 1] = {top, '(' .. int(r[2])}
    top = '(' .. int(r[1])
  end
  spans[#spans + 1] = {top, '-inf'}
  return spans
end


local function stage_key(k, b)
  return k.base .. 'stage:' .. b
end

local function stage_level(k, b, p)
  return k.base .. 'stage:' .. b .. ':ready:' .. p
end

-- How many ids a comma-joined list holds (ids never hold a comma).
local function count_ids(joined)
  local _, commas = string.gsub(joined, ',', '')
  return commas + 1
end

-- Whether an insert row is a workflow step with inputs (row[15]: its inputs).
local function waits_on(job)
  local after = nz(job[15])
  return after ~= nil and #after > 0
end

-- on_conflict = "replace" (row field 17: 1 = the payload, 2 = the payload and run_at): the
-- pending job n holding the key takes the row's payload, and its run_at (row fields 5 and 6,
-- as for a new job) when the row sets one, moving its ready entry. Its other fields stay.
local function replace_pending(k, n, job, now)
  local jk = job_key(k, n)
  redis.call('HSET', jk, 'payload', job[3])
  if job[17] ~= 2 then
    return
  end
  local run_at = nz(job[6]) or (now + job[5])
  local prio = redis.call('HGET', jk, 'priority')
  redis.call('HSET', jk, 'run_at', run_at)
  if prio and tonumber(prio) then
    from_ready(k, n, prio)
    to_ready(k, n, prio, run_at)
  end
end

-- Insert jobs, all or nothing (jobs_insert.lua, schedules_fire.lua).
--   o.now, o.names (queue name per group), o.jobs (rows as jobs_insert.lua's ARGV[8] describes),
--   o.numbers (a job number per row, reserved by the caller, or nil: INCRBY o.seq_key),
--   o.registry (set key or nil),
--   o.wake_keys (per group, or nil), o.ttl_ms ("" = none), o.dry, o.default_attempts,
--   o.stage ({id, lo, hi}: a slice of a staged batch, with o.numbers; see above)
-- Returns {"ok", "number1,number2,...", "10..." (1 = created, 0 = an existing job's number, 2 =
-- an existing pending job's number that took this row's arguments: on_conflict = "replace")}
-- (two strings: a batch's reply stays small), {"full", queue, max_pending}, or {"busy",
-- queue, key} when a job of a batch still staged holds a key (the caller waits for that batch).
local function insert_jobs(o)
  local ng = #o.names
  local groups, cfg, fresh = {}, {}, {} -- fresh: new jobs per group that will be pending
  local counted = {} -- new jobs per group, waiting or pending: what max_pending caps
  local own = o.stage and {{o.stage.lo, o.stage.hi}} -- a slice's own batch (earlier slices)
  for g = 1, ng do
    groups[g] = queue_keys(g)
    if not o.dry and not o.stage then
      lapse_if_due(groups[g])
    end
    cfg[g] = redis.call('HMGET', groups[g].config, 'max_attempts', 'backoff', 'max_pending',
      'fair')
    fresh[g] = 0
    counted[g] = 0
  end

  -- First pass: which jobs are new. A key held by a pending or running job of the same queue
  -- returns that job; a key repeated in this batch maps to its first job.
  local created_total = 0
  local plan = {} -- i -> {n = held number} | {first = index of the batch job holding the key} | {}
  local in_batch = {}
  for i, job in ipairs(o.jobs) do
    local g = job[1]
    local key = nz(job[12])
    local held
    if o.stage and redis.call('EXISTS', job_key(groups[g], int(o.numbers[i]))) == 1 then
      held = {again = true} -- written by this very slice, sent again after its reply was lost
    elseif key then
      local n = redis.call('HGET', groups[g].idem, key)
      if n then
        local st = redis.call('HGET', job_key(groups[g], n), 'status')
        if st == 'pending' or st == 'running' then
          -- A key taken by a batch still being written: wait for its outcome, as a row
          -- lock would make a SQL insert wait (it may yet be abandoned, freeing the key).
          if staged(groups[g], n) and not (own and in_ranges(own, n)) then
            return {'busy', o.names[g], key}
          end
          held = {n = n, replace = st == 'pending' and nz(job[17])}
        end
      end
      if not held and in_batch[g .. '|' .. key] then
        local first = in_batch[g .. '|' .. key]
        held = {first = first}
        if nz(job[17]) then -- a debounce inside the batch: the first job is written with these
          local f = o.jobs[first]
          f[3] = job[3]
          if job[17] == 2 then
            f[5], f[6] = job[5], job[6]
          end
          held.replaced = true
        end
      end
    end
    if held and held.again then
      plan[i] = held
      if key then
        in_batch[g .. '|' .. key] = i
      end
    elseif held then
      plan[i] = held
    else
      plan[i] = {}
      created_total = created_total + 1
      counted[g] = counted[g] + 1
      if not waits_on(job) then
        fresh[g] = fresh[g] + 1
      end
      if key then
        in_batch[g .. '|' .. key] = i
      end
    end
  end

  for g = 1, ng do
    if over_cap(groups[g], cfg[g][3], counted[g]) then
      return {'full', o.names[g], cfg[g][3]}
    end
  end
  local total = created_total
  if o.dry then
    return {'ok'}
  end

  local nextn
  if not o.numbers and total > 0 then
    nextn = redis.call('INCRBY', o.seq_key, total) - total + 1
  end

  -- Second pass: write the new jobs. Index entries are gathered and added with one ZADD per
  -- set and chunk: a batch of thousands of jobs costs one HSET per job and little else.
  local numbers, flags = {}, {}
  local levels = {} -- priority -> its ready set's key, once per batch
  local adds = {} -- key -> {score, member, score, member, ...}
  local order = {}
  local derived = {} -- position -> ids of the batch's steps waiting on it (dependents)
  local low = {} -- group -> its lowest pending turn (fair queues), read once
  local function add(key, score, member)
    local t = adds[key]
    if not t then
      t = {}
      adds[key] = t
      order[#order + 1] = key
    end
    t[#t + 1] = score
    t[#t + 1] = member
  end
  for i, job in ipairs(o.jobs) do
    local p = plan[i]
    local n, created
    if p.n then
      n, created = p.n, 0
      if p.replace then -- on_conflict = "replace" on a pending holder (see replace_pending)
        replace_pending(groups[job[1]], n, job, o.now)
        created = 2
        if job[17] == 2 then
          fresh[job[1]] = fresh[job[1]] + 1 -- its run_at moved: wake a worker
        end
      end
    elseif p.first then
      n, created = numbers[p.first], p.replaced and 2 or 0
    elseif p.again then
      n, created = int(o.numbers[i]), 1
    else
      created = 1
      if o.numbers then
        n = int(o.numbers[i])
      else
        n = int(nextn)
        nextn = nextn + 1
      end
      local g = job[1]
      local k = groups[g]
      local waiting = waits_on(job)
      local fields, prio, run_at = new_fields(job, waiting and 'waiting' or 'pending', o.now,
        cfg[g][1], cfg[g][2], o.default_attempts)
      if nz(job[12]) then
        redis.call('HSET', k.idem, job[12], n)
      end
      local wf = nz(job[14])
      if wf then
        fields[#fields + 1] = 'workflow_id'
        fields[#fields + 1] = wf
        redis.call('HSET', k.workflows, n, wf)
        add(k.base .. 'wf:' .. wf, n, n)
      end
      local early = 0
      local has_inputs = waiting
      -- inputs as ids, joined (numbers reserved beforehand: a staged batch, Cluster), or as
      -- positions in this batch: a join of 100,000 members decodes one string, not a table
      local joined = waiting and type(job[15]) == 'string' and job[15]
      local ninputs = waiting and (joined and count_ids(joined) or #job[15])
      if joined then
        -- inputs counted before the step existed (see count_input)
        local counted = k.base .. 'inputs:' .. n
        early = redis.call('SCARD', counted)
        if early >= ninputs then
          waiting = false -- every input completed: the step is due as it is written
          redis.call('DEL', counted)
          fields[6] = 'pending'
          fresh[g] = fresh[g] + 1
        end
      end
      if has_inputs then
        local depends_on = joined
        if not joined then
          local ids = {}
          local id = o.names[g] .. ':' .. n
          for j, e in ipairs(job[15]) do -- positions of earlier jobs of this batch
            ids[j] = o.names[o.jobs[e][1]] .. ':' .. numbers[e]
            derived[e] = derived[e] or {}
            table.insert(derived[e], id)
          end
          depends_on = table.concat(ids, ',')
        end
        fields[#fields + 1] = 'depends_on'
        fields[#fields + 1] = depends_on
        if waiting then
          fields[#fields + 1] = 'waits'
          fields[#fields + 1] = ninputs - early
        end
      end
      local dependents = nz(job[16])
      if dependents and #dependents > 0 then -- ids, joined (or a list of them)
        fields[#fields + 1] = 'dependents'
        fields[#fields + 1] = type(dependents) == 'string' and dependents
          or table.concat(dependents, ',')
      end
      redis.call('HSET', job_key(k, n), unpack(fields))
      if waiting then
        add(k.waiting, n, n)
      else -- what to_ready does, batched
        local level = levels[g .. ':' .. prio]
        if not level then
          if o.stage then -- the stage's own level, renamed into place when it is published
            level = stage_level(k, o.stage.id, prio)
            redis.call('HSET', stage_key(k, o.stage.id), 'level:' .. prio, '1')
          else
            level = k.base .. 'ready:' .. prio
            add(k.prios, prio, prio)
          end
          levels[g .. ':' .. prio] = level
        end
        add(level, run_at, pad(n))
        add(k.pending, n, n)
        if cfg[g][4] == '1' then -- a fair queue: the job's turn (see above)
          -- A staged job takes its turn too: fair_due passes over its entry while its batch
          -- is hidden. Left to the claims, a large batch's turns cost each claim four calls
          -- a job (a fair drain of batches enqueued 1,000 at a time ran at 71-77 % of the
          -- plain one), paid on the worker's path rather than the producer's.
          if run_at <= o.now then
            low[g] = low[g] or lowest_turn(k)
            take_turn(k, job_key(k, n), n, prio, nz(job[18]), low[g])
          else
            add(unturned_key(k, prio), run_at, pad(n))
          end
        end
      end
    end
    numbers[i] = n
    flags[i] = created
  end

  for pos, ids in pairs(derived) do
    local k = groups[o.jobs[pos][1]]
    redis.call('HSET', job_key(k, numbers[pos]), 'dependents', table.concat(ids, ','))
  end

  for _, key in ipairs(order) do
    local t = adds[key]
    for i = 1, #t, 2000 do -- unpack() is bounded by the Lua C stack (8000 slots)
      redis.call('ZADD', key, unpack(t, i, math.min(i + 1999, #t)))
    end
  end

  for g = 1, ng do
    if o.ttl_ms ~= '' then
      redis.call('SET', groups[g].ttl, o.ttl_ms)
      redis.call('SET', groups[g].alive, '1', 'PX', o.ttl_ms)
    end
    if o.registry then
      redis.call('SADD', o.registry, o.names[g])
    end
    if o.wake_keys then
      wake(o.wake_keys[g], fresh[g])
    end
  end
  return {'ok', table.concat(numbers, ','), table.concat(flags)}
end

-- Cancel job n of queue k (jobs_cancel.lua, jobs_cancel_many.lua): a waiting or pending job is
-- cancelled (its ready level or waiting entry left, its idempotency key freed); a running one
-- gets a request recorded, the first request's time and author kept (unless pending_only).
-- Returns nil when done, else 'missing' (also a job of a batch still staged) or the status
-- that refuses it.
local function cancel_job(k, n, now, failed_ttl, by, pending_only)
  local jk = job_key(k, n)
  local cur = redis.call('HMGET', jk, 'status', 'priority')
  if not cur[1] or staged(k, n) then -- a job of a batch still staged is not there yet
    return 'missing'
  end
  if cur[1] == 'running' and not pending_only then
    if redis.call('HEXISTS', jk, 'cancel_requested_at') == 0 then
      redis.call('HSET', jk, 'cancel_requested_at', now)
      if by ~= '' then
        redis.call('HSET', jk, 'cancelled_by', by)
      end
    end
    return nil
  end
  if cur[1] ~= 'pending' and cur[1] ~= 'waiting' then
    return cur[1]
  end
  if cur[1] == 'waiting' then
    from_waiting(k, jk, n)
  else
    from_ready(k, n, cur[2])
  end
  redis.call('HSET', jk, 'status', 'cancelled', 'finished_at', now, 'cancel_requested_at', now)
  if by ~= '' then
    redis.call('HSET', jk, 'cancelled_by', by)
  else
    redis.call('HDEL', jk, 'cancelled_by')
  end
  to_finished(k, jk, n, 'cancelled', now, failed_ttl)
  return nil
end

-- Re-driving failed or cancelled job n (jobs_retry.lua, jobs_retry_many.lua): pending now,
-- attempts reset, its idempotency key taken back; finished_at, result, the cancellation
-- request, the progress and the dead-letter line cleared, the error kept for history, the
-- hash's expiry removed. Returns nil when done, else why not: {"missing"} (also for a job of
-- a batch still staged), {"status", current status}, {"corrupt", reason} (its priority is
-- unusable), or {"dup", number} (another pending or running job of the queue holds its key).
local function redrive(k, n, now)
  local jk = job_key(k, n)
  local cur = redis.call('HMGET', jk, 'status', 'priority', 'idempotency_key')
  if not cur[1] or staged(k, n) then -- a job of a batch still staged is not there yet
    return {'missing'}
  end
  if cur[1] ~= 'failed' and cur[1] ~= 'cancelled' then
    return {'status', cur[1]}
  end
  local bad = check_number({priority = cur[2]}, 'priority', true, true, -MAX_PRIORITY - 1,
    MAX_PRIORITY)
  if bad then -- it cannot be queued again; anything else corrupt fails it at its next claim
    return {'corrupt', bad}
  end
  local key = cur[3]
  if key then
    local holder = redis.call('HGET', k.idem, key)
    if holder and holder ~= n then
      local st = redis.call('HGET', job_key(k, holder), 'status')
      if st == 'pending' or st == 'running' then
        return {'dup', holder}
      end
    end
    redis.call('HSET', k.idem, key, n)
  end
  from_finished(k, n, cur[1])
  redis.call('PERSIST', jk)
  redis.call('HDEL', jk, 'finished_at', 'result', 'token', 'lease_expires_at',
    'cancel_requested_at', 'cancelled_by', 'progress', 'progress_note', 'dead_line')
  redis.call('HSET', jk, 'status', 'pending', 'attempts', 0, 'run_at', now)
  to_ready(k, n, cur[2], now)
  return nil
end
