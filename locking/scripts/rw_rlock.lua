-- rw_rlock: take a read hold. (rw_lib.lua is prepended.)
--
-- KEYS[1]  the read-write lock hash
-- ARGV[1]  the reader's token
-- ARGV[2]  the TTL in milliseconds
-- ARGV[3]  "1" when waiting writers block new readers (the default), "0" when not
--
-- Returns {1, readers} when held: the number of readers, this one included;
--         {0, wait} when a writer holds the lock or waits for it: wait is the
--         ms until the soonest holder expires (-1 when unknown).
local now = now_ms()
local s = load(KEYS[1], now)
local mine = 'r:' .. ARGV[1]
if s.writer or (ARGV[3] == '1' and s.waiters > 0 and redis.call('HEXISTS', KEYS[1], mine) == 0) then
  return {0, wait_hint(s, now)}
end
if redis.call('HEXISTS', KEYS[1], mine) == 0 then
  s.readers = s.readers + 1
end
local exp = now + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], mine, exp)
rearm(KEYS[1], math.max(s.latest, exp), now)
return {1, s.readers}
