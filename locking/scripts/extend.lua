-- extend: raise a key's TTL if, and only if, it holds the caller's token.
--
-- KEYS[1]  the lock key
-- ARGV[1]  the token
-- ARGV[2]  the TTL in milliseconds; the TTL is raised to at least this, never
--          lowered: an Extend whose answer was lost can reach Redis after a
--          later one was confirmed, and must not cut the TTL the lease
--          counts on
--
-- Returns 1 when the key held the token and its TTL is now at least ARGV[2];
--         0 when it did not (missing, expired or another owner's): nothing changes.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return 1
end
return 0
