-- release: delete a key if, and only if, it holds the caller's token, and
-- announce that it is free. (receipt_lib.lua is prepended.)
--
-- KEYS[1]  the lock key
-- KEYS[2]  the key's release receipt (receipt_lib.lua; same hash slot;
--          absent when the key has none)
-- ARGV[1]  the token
-- ARGV[2]  the release channel (a pub/sub channel, not a key)
-- ARGV[3]  how long a receipt is kept, in milliseconds
--
-- Returns 1 when the key held the token: it is deleted, the token is
--         written to the receipt and a message is published on the channel;
--         1 also when the key does not hold the token but the receipt does:
--         this release, whose answer was lost, sent again (nothing changes);
--         0 otherwise: nothing changes.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  write_receipt(ARGV[1], ARGV[3])
  redis.call('PUBLISH', ARGV[2], KEYS[1])
  return 1
end
if released_by(ARGV[1]) then
  return 1
end
return 0
