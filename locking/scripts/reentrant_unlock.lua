-- reentrant_unlock: give up one hold of a reentrant lock.
--
-- KEYS[1]  the lock hash
-- ARGV[1]  the owner ID
-- ARGV[2]  the release channel (a pub/sub channel, not a key)
--
-- Returns the owner's hold count after this release; at 0 the hash is deleted
--         and a release message is published. Returns -1 when the owner holds
--         nothing: nothing changes.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return -1
end
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if n > 0 then
  return n
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], KEYS[1])
return 0
