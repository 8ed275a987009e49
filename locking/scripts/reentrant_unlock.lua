-- reentrant_unlock: give up one hold of a reentrant lock.
--
-- KEYS[1]  the lock hash (reentrant_lock.lua)
-- ARGV[1]  the owner ID
-- ARGV[2]  the release channel (a pub/sub channel, not a key)
-- ARGV[3]  the hold's token
--
-- Returns the owner's hold count after this release; at 0 the hash is deleted
--         and a release message is published. Returns -1 when this hold is
--         not there (released already, or expired with the hash): nothing
--         changes, so that a retried call, or a hold that outlived its
--         TTL, never gives up another hold of the owner.
if redis.call('HGET', KEYS[1], 'o') ~= ARGV[1] or redis.call('HDEL', KEYS[1], 'h:' .. ARGV[3]) == 0 then
  return -1
end
local n = redis.call('HLEN', KEYS[1]) - 1
if n > 0 then
  return n
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], KEYS[1])
return 0
