-- obtain: take a free key for a token, optionally with a fencing token.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the fence counter (passed only when ARGV[3] is "1"; same hash tag)
-- ARGV[1]  the token
-- ARGV[2]  the TTL in milliseconds
-- ARGV[3]  "1" to advance the fence counter, "0" not to
--
-- A fence is the larger of the last one plus 1 and Redis's clock in µs
-- (TIME): it grows with every lease, and still does after Redis lost the
-- counter (a restart without persistence, a failover to a replica that
-- lagged), provided the Redis hosts' clocks are in step. (A Lua number
-- holds µs since 1970 exactly: about 1.8e15, under 2^53.)
--
-- Returns {1, fence} when the key was free and is now the token's (fence 0
--         without fencing), or when it already holds this token (a retried call);
--         {0, pttl} when another owner holds it: the holder's PTTL in ms (-1: none).
local function next_fence()
  local t = redis.call('TIME')
  local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local f = (tonumber(redis.call('GET', KEYS[2])) or 0) + 1
  if now_us > f then
    f = now_us
  end
  redis.call('SET', KEYS[2], string.format('%.0f', f))
  return f
end

local cur = redis.call('GET', KEYS[1])
if cur == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  local fence = 0
  if ARGV[3] == '1' then
    fence = next_fence()
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
