-- rw_wlock: take the write hold. (rw_lib.lua is prepended.)
--
-- KEYS[1]  the read-write lock hash
-- ARGV[1]  the writer's token
-- ARGV[2]  the TTL in milliseconds
-- ARGV[3]  when refused, register (or refresh) this writer as waiting for this
--          many ms, which blocks new readers; "0" not to (TryLock)
--
-- Returns {1, 0} when held (its waiting mark, if any, is removed);
--         {0, wait} when readers or another writer hold the lock: wait is the
--         ms until the soonest holder expires.
local now = now_ms()
local s = load(KEYS[1], now)
local mine = 'w:' .. ARGV[1]
if s.writer == mine then -- a retried call
  return {1, 0}
end
if s.writer or s.readers > 0 then
  local waitfor = tonumber(ARGV[3])
  if waitfor > 0 then
    local qexp = now + waitfor
    redis.call('HSET', KEYS[1], 'q:' .. ARGV[1], qexp)
    rearm(KEYS[1], math.max(s.latest, qexp), now)
  end
  return {0, wait_hint(s, now)}
end
redis.call('HDEL', KEYS[1], 'q:' .. ARGV[1])
local exp = now + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], mine, exp)
rearm(KEYS[1], math.max(s.latest, exp), now)
return {1, 0}
