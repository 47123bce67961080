-- _flows.lua: workflow retention, prepended to every job script after _lib.lua. Not an
-- operation of its own.
--
-- A completed job is *held* while one of its dependents exists and has not completed (a failed
-- or cancelled one too: a retry reads its inputs again). Field "holds" of the job hash counts
-- those dependents, written lazily: a completion adds its number of dependents (HINCRBY), and
-- each dependent's completion, or its deletion before it completed, takes one off -- a deletion
-- may come first, leaving the count below zero until the input completes. A held job is in the
-- zset "<base>held" (score finished_at) instead of done:completed and has no key TTL, so neither
-- retention (jobs_expire) nor a purge, which walk done:completed, ever reaches it. The move that
-- takes its last hold off frees it (free): into done:completed by its own finished_at, with
-- what is left of its queue's retention as its TTL.
--
-- Deleting a job that had not completed (a purge or an expiry of a failed or cancelled one)
-- takes one hold off each of its inputs, and deletes its waiting dependents, which can never
-- run now, with theirs, transitively (drop_linked).
--
-- Reach. On one node a script reaches every queue (keys_at). On Cluster it reaches its own
-- queue only: what concerns a job of another queue is recorded in the owed hash of the job's
-- queue, field "f<n>" (inputs of job n to take a hold off: n completed or was deleted) or
-- "d<n>" (dependents of deleted job n to delete if waiting), and returned as a note
-- {"owed", group, field, ids}; the backend pays it (jobs_unhold.lua, jobs_drop.lua), clears
-- the field, and leases_reap reports what a caller that died left. A hold paid as owed is taken
-- off once per (input, dependent) whatever the repeats: the set "<base>freed:<n>" remembers
-- whose holds were taken off job n; a drop finds the job gone, or no longer waiting.

-- What a script that frees or deletes workflow jobs carries along: now; the store's default
-- retention of completed jobs (ttl, for retention_of); whether it reaches every queue (single);
-- the key prefix; the group whose owed hash takes notes (g); the notes; how many waiting jobs
-- it deleted; the bases of the queues where it freed a job; the jobs it already deleted.
local function new_ctx(now, ttl, single, prefix, notes)
  return {now = now, ttl = ttl, single = single, prefix = prefix, g = 1, notes = notes or {},
    waiting = 0, freed = {}, seen = {}, drop_linked = nil}
end

-- The keys and number of job `id` if this script may touch it (k: the keys of the job it is
-- linked from), else nil and the number.
local function reach(ctx, k, id)
  local q, n = parse_id(id)
  local base = '{' .. ctx.prefix .. ':' .. q .. '}:'
  if base == k.base then
    return k, n
  end
  if ctx.single then
    return keys_at(base), n
  end
  return nil, n
end

-- Record what job n of keys k owes jobs out of reach (kind "f" or "d", see the top).
local function owe(ctx, k, kind, n, ids)
  if #ids == 0 then
    return
  end
  local value = table.concat(ids, ',')
  redis.call('HSET', k.owed, kind .. n, value)
  ctx.notes[#ctx.notes + 1] = {'owed', ctx.g, kind .. n, value}
end

-- Completed job n (hash jk, dependents `deps`) as it completes: held by its dependents that
-- have not completed nor been deleted. Returns true if held: the caller then puts it in k.held
-- (hold_index) instead of done:completed, and gives it no TTL.
local function holds_at_completion(k, jk, n, deps)
  local left = redis.call('HINCRBY', jk, 'holds', #split_ids(deps))
  if left > 0 then
    return true
  end
  redis.call('HDEL', jk, 'holds')
  redis.call('DEL', k.base .. 'freed:' .. n)
  return false
end

-- Job dn of keys dk (hash jk, finished at `finished`) has no hold left: retention may take it.
local function free(ctx, dk, jk, dn, finished)
  redis.call('HDEL', jk, 'holds')
  redis.call('ZREM', dk.held, dn)
  redis.call('ZADD', dk.done_completed, finished, dn)
  redis.call('DEL', dk.base .. 'freed:' .. dn)
  local keep = retention_of(dk, ctx.ttl)
  if keep > 0 then
    redis.call('EXPIRE', jk, math.max(1, math.ceil(finished + keep - ctx.now)))
  end
  ctx.freed[dk.base] = true
end

-- Job dn of keys dk loses a hold: a dependent completed, or was deleted before it completed.
-- `by`: that dependent's id when the hold is paid as owed (counted once, see the top).
-- Returns 1 if this freed a completed job, else 0.
local function unhold(ctx, dk, dn, by)
  local jk = job_key(dk, dn)
  local f = redis.call('HMGET', jk, 'status', 'finished_at')
  if not f[1] then
    return 0
  end
  if by and redis.call('SADD', dk.base .. 'freed:' .. dn, by) == 0 then
    return 0
  end
  local left = redis.call('HINCRBY', jk, 'holds', -1)
  if f[1] ~= 'completed' or left > 0 then
    return 0
  end
  free(ctx, dk, jk, dn, tonumber(f[2]) or ctx.now)
  return 1
end

-- Job n of keys k completed, or is deleted before it completed: each of its inputs (ids,
-- comma separated) loses a hold; those out of reach are owed.
local function unhold_inputs(ctx, k, n, inputs)
  local far = {}
  for _, id in ipairs(split_ids(inputs)) do
    local dk, dn = reach(ctx, k, id)
    if dk then
      unhold(ctx, dk, dn, nil)
    else
      far[#far + 1] = id
    end
  end
  owe(ctx, k, 'f', n, far)
end

-- Delete job n of keys k (its status `status`; has_wf as for drop_job) with what hangs on it:
-- a job that had not completed takes a hold off each of its inputs, and its waiting
-- dependents, which can never run now, are deleted too, transitively (counted in ctx.waiting,
-- a waiting n too). On a stack, not by recursion: a chain may hold 100,000 steps.
local function drop_linked(ctx, k, n, status, has_wf)
  local todo = {{k, n, status, has_wf}}
  while #todo > 0 do
    local item = table.remove(todo)
    local ik, inum, st = item[1], item[2], item[3]
    local id = ik.base .. inum
    if not ctx.seen[id] then
      ctx.seen[id] = true
      local f = redis.call('HMGET', job_key(ik, inum), 'depends_on', 'dependents')
      drop_job(ik, inum, st, item[4])
      if st == 'waiting' then
        ctx.waiting = ctx.waiting + 1
      end
      if st ~= 'completed' then
        unhold_inputs(ctx, ik, inum, f[1])
        local far = {}
        for _, dep in ipairs(split_ids(f[2])) do
          local dk, dn = reach(ctx, ik, dep)
          if not dk then
            far[#far + 1] = dep
          elseif redis.call('HGET', job_key(dk, dn), 'status') == 'waiting' then
            todo[#todo + 1] = {dk, dn, 'waiting', redis.call('EXISTS', dk.workflows) == 1}
          end
        end
        owe(ctx, ik, 'd', inum, far)
      end
    end
  end
end

-- A ctx that lapse_if_due (_lib.lua, loaded before this file) can drop linked jobs with.
local function lapse_ctx(ctx)
  ctx.drop_linked = drop_linked
  return ctx
end
