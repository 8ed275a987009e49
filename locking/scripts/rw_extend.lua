-- rw_extend: raise one hold's expiry. (rw_lib.lua is prepended.)
--
-- KEYS[1]  the read-write lock hash
-- ARGV[1]  the holder's token
-- ARGV[2]  "r" for a read hold, "w" for the write hold
-- ARGV[3]  the TTL in milliseconds; the hold's expiry is raised to at least
--          ARGV[3] ms from now, never lowered: an Extend whose answer was
--          lost can reach Redis after a later one was confirmed, and must
--          not cut the expiry the lease counts on
--
-- Returns 1 when the hold was live and now expires ARGV[3] ms from now or later;
--         0 when the token holds nothing of that kind: nothing changes.
local now = now_ms()
local field = ARGV[2] .. ':' .. ARGV[1]
local held = field_exp(KEYS[1], field, now)
if held == nil then
  return 0
end
local exp = now + tonumber(ARGV[3])
if exp <= held then
  return 1
end
redis.call('HSET', KEYS[1], field, exp)
local s = load(KEYS[1], now)
rearm(KEYS[1], s.latest, now)
return 1
