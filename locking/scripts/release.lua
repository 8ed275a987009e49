-- release: delete a key if, and only if, it holds the caller's token, and
-- announce that it is free.
--
-- KEYS[1]  the lock key
-- ARGV[1]  the token
-- ARGV[2]  the release channel (a pub/sub channel, not a key)
--
-- Returns 1 when the key held the token: it is deleted and a message is
--         published on the channel; 0 when it did not: nothing changes.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], KEYS[1])
  return 1
end
return 0
