-- release: delete a key if, and only if, it holds the caller's token, and
-- announce that it is free.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the key's release receipt (same hash slot; absent when the key
--          has none, see receiptKeys): the token of its last release
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
  if KEYS[2] then
    redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
  end
  redis.call('PUBLISH', ARGV[2], KEYS[1])
  return 1
end
if KEYS[2] and redis.call('GET', KEYS[2]) == ARGV[1] then
  return 1
end
return 0
