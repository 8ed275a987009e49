-- reentrant_extend: raise a reentrant lock's TTL if the owner holds it.
--
-- KEYS[1]  the lock hash
-- ARGV[1]  the owner ID
-- ARGV[2]  the TTL in milliseconds; the TTL is raised to at least this, never
--          lowered, so that extending one hold never cuts another hold short
--
-- Returns 1 when the owner holds the lock; 0 when it does not: nothing changes.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return 0
end
local ttl = tonumber(ARGV[2])
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return 1
