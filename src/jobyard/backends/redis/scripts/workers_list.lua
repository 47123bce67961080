-- workers_list.lua: the registered workers.
--
-- KEYS: [1] workers zset (id -> last_seen)   [2] workers info hash (id -> JSON)
-- ARGV: none
-- Touches: nothing.
-- Returns: 3 strings per worker: id, last_seen, JSON.

local out = {}
local rows = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #rows, 2 do
  local info = redis.call('HGET', KEYS[2], rows[i])
  if info then
    out[#out + 1] = rows[i]
    out[#out + 1] = rows[i + 1]
    out[#out + 1] = info
  end
end
return out
