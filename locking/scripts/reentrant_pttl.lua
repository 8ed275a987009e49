-- reentrant_pttl: a reentrant lock's remaining TTL and the owner's hold count.
--
-- KEYS[1]  the lock hash
-- ARGV[1]  the owner ID
--
-- Returns {pttl, count} when the owner holds the lock (pttl -1: no TTL);
--         {-3, 0} when it does not.
local n = redis.call('HGET', KEYS[1], ARGV[1])
if n == false then
  return {-3, 0}
end
return {redis.call('PTTL', KEYS[1]), tonumber(n)}
