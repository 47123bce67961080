-- _lists.lua: helpers prepended to the list_ scripts (a list other programs push onto). Not an
-- operation of its own.
--
-- Delivery caps (max_deliveries): a list has no delivery count of its own, so a reliable list
-- keeps one beside its recovery set, in the hash "<list>.deliveries" (entry -> deliveries that
-- ended without an acknowledgement so far), and every dead entry's reason in the hash
-- "<dead list>.reasons" (entry -> why it is there). Identical entries share one count.

-- One more delivery of entry `e` ended without an acknowledgement (its handler failed, or its
-- consumer stopped and the watchdog took it back). `cap`: max_deliveries, "" = none. Returns
-- true if that was the last delivery the cap allows: the entry is then on the dead list, with
-- `why` as its reason, and its count is gone; false: it may be delivered again.
local function past_cap(deliveries, dead, reasons, e, cap, why)
  if cap == '' then
    return false
  end
  local n = redis.call('HINCRBY', deliveries, e, 1)
  if n < tonumber(cap) then
    return false
  end
  redis.call('HDEL', deliveries, e)
  redis.call('RPUSH', dead, e)
  redis.call('HSET', reasons, e,
    string.format('delivered %d times (max_deliveries=%s); last: %s', n, cap, why))
  return true
end
