-- rw_unwait: withdraw a waiting writer's mark, when it stops waiting without
-- the lock, so that readers need not wait for the mark to expire.
-- (rw_lib.lua is prepended.)
--
-- KEYS[1]  the read-write lock hash
-- ARGV[1]  the writer's token
-- ARGV[2]  the release channel (a pub/sub channel, not a key)
--
-- Returns 1 when a mark was withdrawn (and a message published to wake
--         readers); 0 when there was none.
local now = now_ms()
if redis.call('HDEL', KEYS[1], 'q:' .. ARGV[1]) == 0 then
  return 0
end
local s = load(KEYS[1], now)
rearm(KEYS[1], s.latest, now)
redis.call('PUBLISH', ARGV[2], KEYS[1])
return 1
