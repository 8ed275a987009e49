-- rw_pttl: one hold's remaining time. (rw_lib.lua is prepended.)
--
-- KEYS[1]  the read-write lock hash
-- ARGV[1]  the holder's token
-- ARGV[2]  "r" for a read hold, "w" for the write hold
--
-- Returns the ms until the hold expires; -3 when the token holds nothing of that kind.
local now = now_ms()
local exp = field_exp(KEYS[1], ARGV[2] .. ':' .. ARGV[1], now)
if exp == nil then
  return -3
end
return exp - now
