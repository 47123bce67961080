-- jobs_insert.lua: insert a batch of jobs into one or more queues, all or nothing.
--
-- KEYS: the 16 keys of each queue group (see _base.lua); then, when ARGV[4] is "1" (a single
--       Redis node): the job sequence, the queue registry set, and one wake list per group.
-- ARGV: [1] now, "" = Redis TIME        [2] JSON array of the groups' queue names
--       [3] JSON array of a reserved job number per job, "" = take them from the sequence key
--       [4] "1" = the global keys follow  [5] queue ttl in ms, "" = none  [6] "1" = dry run
--       [7] default max_attempts
--       [8] JSON array of jobs, each [group, name, payload, priority, delay, run_at|null,
--           max_attempts|null, backoff|null, timeout|null, lease, delivery,
--           idempotency_key|null, parent_id|null] and, for a workflow job only, three more:
--           workflow_id|null, inputs (1-based positions of earlier jobs of this array, or
--           their ids joined by commas when the numbers were reserved; none: not waiting),
--           dependents (ids joined by commas, given with reserved numbers; else derived from
--           the positions); a plain job with on_conflict = "replace" carries those three as
--           null and a 17th: 1 = replace a pending holder's payload, 2 = its payload and run_at
-- Touches: job hashes, ready levels, prios, pending (waiting for a step with inputs), idem,
--          workflows and wf:<id> (workflow jobs), ttl/alive of each group; with the
--          global keys: INCRBY on the sequence, SADD on the registry, LPUSH/LTRIM on wake lists.
-- Returns: {"ok", "number1,number2,...", "110..."} in job order (1: created, 0: the number of
--          the job holding its idempotency key, 2: that of a pending holder given the job's
--          arguments), or {"full", queue, max_pending} having written
--          nothing.

local names = cjson.decode(ARGV[2])
local ng = #names
local o = {
  now = now_from(ARGV[1]),
  names = names,
  jobs = cjson.decode(ARGV[8]),
  ttl_ms = ARGV[5],
  dry = ARGV[6] == '1',
  default_attempts = tonumber(ARGV[7]),
}
if ARGV[3] ~= '' then
  o.numbers = cjson.decode(ARGV[3])
end
if ARGV[4] == '1' then
  o.seq_key = KEYS[ng * NQ + 1]
  o.registry = KEYS[ng * NQ + 2]
  o.wake_keys = {}
  for g = 1, ng do
    o.wake_keys[g] = KEYS[ng * NQ + 2 + g]
  end
end
return insert_jobs(o)
