-- rw_unlock: give up a read or write hold. (rw_lib.lua and receipt_lib.lua
-- are prepended.)
--
-- KEYS[1]  the read-write lock hash
-- KEYS[2]  the lock's release receipt (receipt_lib.lua; same hash slot;
--          absent when the key has none)
-- ARGV[1]  the holder's token
-- ARGV[2]  "r" for a read hold, "w" for the write hold
-- ARGV[3]  the release channel (a pub/sub channel, not a key)
-- ARGV[4]  how long a receipt is kept, in milliseconds
--
-- Returns the number of holders left (readers, or writer) when the hold was
--         live and is now gone, and writes the token to the receipt; a
--         release message is published when no holder is left. When the
--         token holds nothing of that kind, nothing changes: it returns 0
--         when the receipt holds the token (this release, whose answer was
--         lost, sent again; the count is not known then), else -1 (the hold
--         expired or was never there).
local now = now_ms()
local field = ARGV[2] .. ':' .. ARGV[1]
if field_exp(KEYS[1], field, now) == nil then
  if released_by(ARGV[1]) then
    return 0
  end
  return -1
end
redis.call('HDEL', KEYS[1], field)
write_receipt(ARGV[1], ARGV[4])
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
