-- ready_merge.lua: move the entries of a queue's segments (a published stage's ready entries,
-- left beside a ready level that held jobs already: see jobs_publish.lua) into their levels,
-- a bounded number per call, so claims read one key per priority again. Claims read segments
-- meanwhile, so nothing is hidden or shown twice by a move.
--
-- KEYS: the 16 keys of the queue (see _base.lua).
-- ARGV: [1] at most this many entries moved per call   [2] batch id: only its segments
-- Touches: the segments "ready:<p>@<batch>" (entries moved out; gone once empty, and their
--          prios member with them), the ready levels (ZADD NX: an entry the level holds
--          already was written there by a later move of its job, and keeps its score), prios.
-- Returns: how many entries the batch's segments of this queue still hold.

local k = queue_keys(1)
local left = tonumber(ARGV[1])
local suffix = '@' .. ARGV[2]
local remaining = 0
local members = redis.call('ZRANGE', k.prios, 0, -1, 'WITHSCORES')
for i = 1, #members, 2 do
  local m = members[i]
  if string.sub(m, -#suffix) == suffix then
    local p = string.sub(m, 1, -#suffix - 1)
    local seg = k.base .. 'ready:' .. m
    if left > 0 then
      local entries = redis.call('ZRANGE', seg, 0, left - 1, 'WITHSCORES')
      if #entries > 0 then
        local add, gone = {}, {}
        for j = 1, #entries, 2 do
          add[#add + 1] = entries[j + 1]
          add[#add + 1] = entries[j]
          gone[#gone + 1] = entries[j]
        end
        local level = k.base .. 'ready:' .. p
        for j = 1, #add, 2000 do -- unpack() is bounded by the Lua C stack; 2000 is even
          redis.call('ZADD', level, 'NX', unpack(add, j, math.min(j + 1999, #add)))
        end
        for j = 1, #gone, 2000 do
          redis.call('ZREM', seg, unpack(gone, j, math.min(j + 1999, #gone)))
        end
        redis.call('ZADD', k.prios, p, p)
        left = left - #gone
      end
    end
    if redis.call('EXISTS', seg) == 0 then
      redis.call('ZREM', k.prios, m)
    else
      remaining = remaining + redis.call('ZCARD', seg)
    end
  end
end
return remaining
