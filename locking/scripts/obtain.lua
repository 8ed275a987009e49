-- obtain: take a free key for a token, optionally with a fencing token.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the fence counter (passed only when ARGV[3] is "1"; same hash tag)
-- ARGV[1]  the token
-- ARGV[2]  the TTL in milliseconds
-- ARGV[3]  "1" to INCR the fence counter, "0" not to
--
-- Returns {1, fence} when the key was free and is now the token's (fence 0
--         without fencing), or when it already holds this token (a retried call);
--         {0, pttl} when another owner holds it: the holder's PTTL in ms (-1: none).
local cur = redis.call('GET', KEYS[1])
if cur == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  local fence = 0
  if ARGV[3] == '1' then
    fence = redis.call('INCR', KEYS[2])
  end
  return {1, fence}
end
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  local fence = 0
  if ARGV[3] == '1' then
    fence = tonumber(redis.call('GET', KEYS[2]))
  end
  return {1, fence}
end
return {0, redis.call('PTTL', KEYS[1])}
