-- list_take.lua: a reliable list consumer takes entries, each recorded in the recovery set in
-- the same step (seed 003: "each move records the entry in a sorted set, scored by the time it
-- was taken").
--
-- KEYS: [1] the list   [2] its processing list   [3] its recovery set (entry -> ms taken)
-- ARGV: [1] now in ms, "" = Redis TIME   [2] "right" or "left": the end entries are popped from
--       [3] at most this many entries   [4] recovery set ttl in ms, "" = none
-- Touches: LMOVE list -> processing (pushed on the processing list's left), ZADD recovery set,
--          PEXPIRE recovery set (re-armed at every take).
-- Returns: the entries taken, oldest first.

local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local from = 'RIGHT'
if ARGV[2] == 'left' then
  from = 'LEFT'
end
local out = {}
for _ = 1, tonumber(ARGV[3]) do
  local e = redis.call('LMOVE', KEYS[1], KEYS[2], from, 'LEFT')
  if not e then
    break
  end
  redis.call('ZADD', KEYS[3], now, e)
  out[#out + 1] = e
end
if #out > 0 and ARGV[4] ~= '' then
  redis.call('PEXPIRE', KEYS[3], ARGV[4])
end
return out
