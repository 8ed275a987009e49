-- pttl: the remaining TTL of a key, if it holds the caller's token.
--
-- KEYS[1]  the lock key
-- ARGV[1]  the token
--
-- Returns the PTTL in milliseconds (-1 when the key has no TTL) when the key
--         holds the token; -3 when it does not.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PTTL', KEYS[1])
end
return -3
