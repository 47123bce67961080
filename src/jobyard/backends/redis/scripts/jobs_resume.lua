-- jobs_resume.lua: re-drive the failed or cancelled workflow jobs of one or more queues
-- (app.resume_workflow): attempts reset as jobs_retry.lua does, each job pending if all its
-- inputs completed, else waiting again with waits = its inputs not completed yet, which
-- their completions count off (count_input in _lib.lua) as at insert. The inputs are read in
-- this script, so none completes between the count and the move. On Cluster an input in
-- another queue (another slot) cannot be read here: it counts as not completed, and the job's
-- number is owed to be checked ("w<n>" in the queue's owed hash, the ids of those inputs):
-- the caller counts off those that completed (jobs_release.lua, once per input whatever the
-- repeats), then clears the entry; leases_reap.lua reports an entry a dead caller left.
--
-- KEYS: the 16 keys of each queue group (see _base.lua); then, when ARGV[4] is "1" (a single
--       Redis node), each group's wake list, in group order.
-- ARGV: [1] now, "" = Redis TIME   [2] number of groups   [3] the key prefix
--       [4] "1" = a single node (inputs in any queue are read here)   then, per group, its
--       job numbers, comma separated
-- Touches: per job moved: the job hash (status, attempts 0, run_at; finished_at, result, the
--          cancellation request and the progress cleared, error kept for history; waits; its
--          expiry removed), the finished state's two indexes, "inputs:<n>" (deleted: no input
--          counted yet), and either the ready level, prios and pending (pending) or waiting;
--          reads the inputs' statuses. A job that is missing, still staged, in another status,
--          holding an idempotency key or with an unusable priority is skipped.
-- Returns: {group, number, group, number, ...}: the jobs moved, in the order given; then
--          arrays: {"owed", group, "w<number>", input ids} (Cluster) for each job whose inputs
--          in other queues are to be checked, and {"woke", group, count} (Cluster) for a
--          group whose jobs became pending (the caller wakes them).

local now = now_from(ARGV[1])
local ng = tonumber(ARGV[2])
local single = ARGV[4] == '1'
local notes = {}
local ctx = new_ctx(now, 0, single, ARGV[3], notes)
local out = {}
for g = 1, ng do
  local k = queue_keys(g)
  local woke = 0
  for _, n in ipairs(split_ids(ARGV[4 + g])) do
    local jk = job_key(k, n)
    local cur = redis.call('HMGET', jk, 'status', 'priority', 'idempotency_key', 'depends_on')
    local stopped = cur[1] == 'failed' or cur[1] == 'cancelled'
    if stopped and not cur[3] and not staged(k, n)
        and not check_number({priority = cur[2]}, 'priority', true, true, -MAX_PRIORITY - 1,
          MAX_PRIORITY) then
      local waits, far = 0, {}
      for _, id in ipairs(split_ids(cur[4])) do
        local dk, dn = reach(ctx, k, id)
        if not dk then
          far[#far + 1] = id
          waits = waits + 1
        elseif redis.call('HGET', job_key(dk, dn), 'status') ~= 'completed' then
          waits = waits + 1
        end
      end
      from_finished(k, n, cur[1])
      redis.call('PERSIST', jk)
      redis.call('HDEL', jk, 'finished_at', 'result', 'token', 'lease_expires_at',
        'cancel_requested_at', 'cancelled_by', 'progress', 'progress_note', 'waits')
      redis.call('DEL', k.base .. 'inputs:' .. n)
      redis.call('HSET', jk, 'attempts', 0, 'run_at', now)
      if waits > 0 then
        redis.call('HSET', jk, 'status', 'waiting', 'waits', waits)
        redis.call('ZADD', k.waiting, n, n)
        if #far > 0 then
          ctx.g = g
          owe(ctx, k, 'w', n, far)
        end
      else
        redis.call('HSET', jk, 'status', 'pending')
        to_ready(k, n, cur[2], now)
        woke = woke + 1
      end
      out[#out + 1] = g
      out[#out + 1] = n
    end
  end
  if woke > 0 then
    if single then
      wake(KEYS[ng * NQ + g], woke)
    else
      notes[#notes + 1] = {'woke', g, woke}
    end
  end
end
for _, note in ipairs(notes) do
  out[#out + 1] = note
end
return out
