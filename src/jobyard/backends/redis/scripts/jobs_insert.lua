-- jobs_insert.lua: insert a batch of jobs into one or more queues, all or nothing.
--
-- KEYS: the 13 keys of each queue group (see _lib.lua), ARGV[3] groups in all; then, when ARGV[4]
--       is "1" (a single Redis node): the job sequence, the queue registry set, and one wake list
--       per group.
-- ARGV: [1] now, "" = Redis TIME        [2] JSON array of the groups' queue names
--       [3] first job number, "" = take the numbers from the sequence key
--       [4] "1" = the global keys follow  [5] queue ttl in ms, "" = none  [6] "1" = dry run
--       [7] default max_attempts
--       [8] JSON array of jobs, each [group, name, payload, priority, delay, run_at|null,
--           max_attempts|null, backoff|null, timeout|null, lease, delivery,
--           idempotency_key|null, parent_id|null]
-- Touches: job hashes, ready levels, prios, pending, idem, ttl/alive of each group; with the
--          global keys: INCRBY on the sequence, SADD on the registry, LPUSH/LTRIM on wake lists.
-- Returns: {"ok", number1, created1, number2, created2, ...} in job order (created: 1 or 0),
--          or {"full", queue, max_pending} having written nothing.

local now = now_from(ARGV[1])
local names = cjson.decode(ARGV[2])
local ng = #names
local seq_base = ARGV[3]
local global = ARGV[4] == '1'
local ttl_ms = ARGV[5]
local dry = ARGV[6] == '1'
local default_attempts = tonumber(ARGV[7])
local jobs = cjson.decode(ARGV[8])

local groups, cfg, fresh = {}, {}, {}
for g = 1, ng do
  groups[g] = queue_keys(g)
  if not dry then
    lapse_if_due(groups[g])
  end
  cfg[g] = redis.call('HMGET', groups[g].config, 'max_attempts', 'backoff', 'max_pending')
  fresh[g] = 0
end

-- First pass: which jobs are new. A key held by a pending or running job of the same queue
-- returns that job; a key repeated in this batch maps to its first job.
local plan = {} -- i -> {n = held number} | {first = index of the batch job holding the key}
local in_batch = {}
for i, job in ipairs(jobs) do
  local g = job[1]
  local key = nz(job[12])
  local held
  if key then
    local n = redis.call('HGET', groups[g].idem, key)
    if n then
      local st = redis.call('HGET', job_key(groups[g], n), 'status')
      if st == 'pending' or st == 'running' then
        held = {n = n}
      end
    end
    if not held and in_batch[g .. '|' .. key] then
      held = {first = in_batch[g .. '|' .. key]}
    end
  end
  if held then
    plan[i] = held
  else
    plan[i] = {}
    fresh[g] = fresh[g] + 1
    if key then
      in_batch[g .. '|' .. key] = i
    end
  end
end

local total = 0
for g = 1, ng do
  local max_pending = tonumber(cfg[g][3])
  if max_pending and fresh[g] > 0
    and redis.call('ZCARD', groups[g].pending) + fresh[g] > max_pending then
    return {'full', names[g], cfg[g][3]}
  end
  total = total + fresh[g]
end
if dry then
  return {'ok'}
end

local nextn
if seq_base ~= '' then
  nextn = tonumber(seq_base)
elseif total > 0 then
  nextn = redis.call('INCRBY', KEYS[ng * NQ + 1], total) - total + 1
end

-- Second pass: write the new jobs.
local out = {'ok'}
local numbers = {}
for i, job in ipairs(jobs) do
  local p = plan[i]
  local n, created
  if p.n then
    n, created = p.n, 0
  elseif p.first then
    n, created = numbers[p.first], 0
  else
    n, created = int(nextn), 1
    nextn = nextn + 1
    local g = job[1]
    local k = groups[g]
    local prio = int(job[4])
    local run_at = nz(job[6]) or (now + job[5])
    local fields = {
      'name', job[2], 'queue', names[g], 'payload', job[3], 'status', 'pending',
      'priority', prio, 'attempts', 0,
      'max_attempts', nz(job[7]) or tonumber(cfg[g][1]) or default_attempts,
      'run_at', run_at, 'created_at', now, 'lease', job[10], 'delivery', job[11],
    }
    local backoff = nz(job[8]) or cfg[g][2]
    if backoff then
      table.insert(fields, 'backoff'); table.insert(fields, backoff)
    end
    if nz(job[9]) then
      table.insert(fields, 'timeout'); table.insert(fields, job[9])
    end
    if nz(job[12]) then
      table.insert(fields, 'idempotency_key'); table.insert(fields, job[12])
      redis.call('HSET', k.idem, job[12], n)
    end
    if nz(job[13]) then
      table.insert(fields, 'parent_id'); table.insert(fields, job[13])
    end
    redis.call('HSET', job_key(k, n), unpack(fields))
    to_ready(k, n, prio, run_at)
  end
  numbers[i] = n
  out[#out + 1] = n
  out[#out + 1] = created
end

for g = 1, ng do
  if ttl_ms ~= '' then
    redis.call('SET', groups[g].ttl, ttl_ms)
    redis.call('SET', groups[g].alive, '1', 'PX', ttl_ms)
  end
  if global then
    redis.call('SADD', KEYS[ng * NQ + 2], names[g])
    wake(KEYS[ng * NQ + 2 + g], fresh[g])
  end
end
return out
