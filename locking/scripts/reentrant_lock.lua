-- reentrant_lock: take, or take again, a reentrant lock for an owner.
--
-- KEYS[1]  the lock: a hash whose field "o" is the owner ID and whose
--          fields "h:<hold>" are its holds, one per hold (their values: 1)
-- ARGV[1]  the owner ID
-- ARGV[2]  the TTL in milliseconds; the hash's TTL is raised to at least this, never lowered
-- ARGV[3]  the hold's own token: a retried call (its reply lost) adds no
--          second hold
--
-- Returns {1, count} when the lock was free or already the owner's: count is
--         the owner's hold count after this hold;
--         {0, pttl} when another owner holds it: the holder's PTTL in ms (-1: none).
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HGET', KEYS[1], 'o') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'o', ARGV[1], 'h:' .. ARGV[3], 1)
  local ttl = tonumber(ARGV[2])
  if redis.call('PTTL', KEYS[1]) < ttl then
    redis.call('PEXPIRE', KEYS[1], ttl)
  end
  return {1, redis.call('HLEN', KEYS[1]) - 1}
end
return {0, redis.call('PTTL', KEYS[1])}
