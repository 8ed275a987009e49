-- reentrant_unlock: give up one hold of a reentrant lock. (receipt_lib.lua
-- is prepended.)
--
-- KEYS[1]  the lock hash (reentrant_lock.lua)
-- KEYS[2]  the lock's release receipt (receipt_lib.lua; same hash slot;
--          absent when the key has none)
-- ARGV[1]  the owner ID
-- ARGV[2]  the release channel (a pub/sub channel, not a key)
-- ARGV[3]  the hold's token
-- ARGV[4]  how long a receipt is kept, in milliseconds
--
-- Returns the owner's hold count after this release; at 0 the hash is deleted
--         and a release message is published; the token is written to the
--         receipt. When this hold is not there, nothing changes, so that a
--         retried call, or a hold that outlived its TTL, never gives up
--         another hold of the owner: it returns 0 when the receipt holds the
--         token (this release, whose answer was lost, sent again; the count
--         is not known then), else -1.
if redis.call('HGET', KEYS[1], 'o') ~= ARGV[1] or redis.call('HDEL', KEYS[1], 'h:' .. ARGV[3]) == 0 then
  if released_by(ARGV[3]) then
    return 0
  end
  return -1
end
write_receipt(ARGV[3], ARGV[4])
local n = redis.call('HLEN', KEYS[1]) - 1
if n > 0 then
  return n
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], KEYS[1])
return 0
