-- throughput_get.lua: the throughput history of one or more queues (Backend.throughput_get).
--
-- KEYS: the 16 keys of each queue group (see _base.lua); the hashes read are built from each
--       group's base, "<base>tp:<hour>", on its slot.
-- ARGV: [1] now, "" = Redis TIME   [2] number of groups   [3] seconds of history wanted, at
--       most TP_KEEP minus an hour (so a frozen test clock, which key TTLs ignore, reads what
--       the other stores' pruning would have kept)
-- Touches: nothing (HGETALL of the hour hashes that hold minutes ending after now - since: 2
--          for an hour, 25 for a day).
-- Returns: 4 strings per minute kept: group, minute start, completed, failed.

local now = now_from(ARGV[1])
local ng = tonumber(ARGV[2])
local since = math.min(tonumber(ARGV[3]), TP_KEEP - 3600)
local start = now - since - 60 -- minutes that start after this end after now - since
local out = {}
for g = 1, ng do
  local k = queue_keys(g)
  local minutes, order = {}, {}
  for hour = math.floor(start / 3600), math.floor(now / 3600) do
    local h = redis.call('HGETALL', k.base .. 'tp:' .. int(hour))
    for i = 1, #h, 2 do
      local field = h[i]
      local m = tonumber(string.sub(field, 1, -2))
      if m and m > start then
        local t = minutes[m]
        if not t then
          t = {0, 0}
          minutes[m] = t
          order[#order + 1] = m
        end
        t[string.sub(field, -1) == 'c' and 1 or 2] = tonumber(h[i + 1])
      end
    end
  end
  table.sort(order)
  for _, m in ipairs(order) do
    out[#out + 1] = tostring(g)
    out[#out + 1] = int(m)
    out[#out + 1] = tostring(minutes[m][1])
    out[#out + 1] = tostring(minutes[m][2])
  end
end
return out
