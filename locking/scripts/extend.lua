-- extend: reset a key's TTL if, and only if, it holds the caller's token.
--
-- KEYS[1]  the lock key
-- ARGV[1]  the token
-- ARGV[2]  the new TTL in milliseconds
--
-- Returns 1 when the key held the token and its TTL is now ARGV[2];
--         0 when it did not (missing, expired or another owner's): nothing changes.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
