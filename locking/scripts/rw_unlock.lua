-- rw_unlock: give up a read or write hold. (rw_lib.lua is prepended.)
--
-- KEYS[1]  the read-write lock hash
-- ARGV[1]  the holder's token
-- ARGV[2]  "r" for a read hold, "w" for the write hold
-- ARGV[3]  the release channel (a pub/sub channel, not a key)
--
-- Returns the number of holders left (readers, or writer) when the hold was
--         live and is now gone; a release message is published when no holder
--         is left. Returns -1 when the token held nothing of that kind (it
--         expired or was never there): nothing changes.
local now = now_ms()
local field = ARGV[2] .. ':' .. ARGV[1]
if field_exp(KEYS[1], field, now) == nil then
  return -1
end
redis.call('HDEL', KEYS[1], field)
local s = load(KEYS[1], now)
rearm(KEYS[1], s.latest, now)
local left = s.readers
if s.writer then
  left = left + 1
end
if left == 0 then
  redis.call('PUBLISH', ARGV[3], KEYS[1])
end
return left
