-- reentrant_pttl: a reentrant lock's remaining TTL and the owner's hold count.
--
-- KEYS[1]  the lock hash (reentrant_lock.lua)
-- ARGV[1]  the owner ID
-- ARGV[2]  a hold's token, or "" for the owner's holds, whichever they are
--
-- Returns {pttl, count} when the owner holds the lock (and has that hold,
--         when ARGV[2] names one) (pttl -1: no TTL); {-3, 0} when not.
if redis.call('HGET', KEYS[1], 'o') ~= ARGV[1] then
  return {-3, 0}
end
if ARGV[2] ~= '' and redis.call('HEXISTS', KEYS[1], 'h:' .. ARGV[2]) == 0 then
  return {-3, 0}
end
return {redis.call('PTTL', KEYS[1]), redis.call('HLEN', KEYS[1]) - 1}
