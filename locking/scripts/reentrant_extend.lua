-- reentrant_extend: raise a reentrant lock's TTL if the hold is there.
--
-- KEYS[1]  the lock hash (reentrant_lock.lua)
-- ARGV[1]  the owner ID
-- ARGV[2]  the TTL in milliseconds; the TTL is raised to at least this, never
--          lowered, so that extending one hold never cuts another hold short
-- ARGV[3]  the hold's token
--
-- Returns 1 when the owner has this hold; 0 when it does not: nothing changes.
if redis.call('HGET', KEYS[1], 'o') ~= ARGV[1] or redis.call('HEXISTS', KEYS[1], 'h:' .. ARGV[3]) == 0 then
  return 0
end
local ttl = tonumber(ARGV[2])
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return 1
