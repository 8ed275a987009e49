-- fence_lib: the fencing token, shared by claim and takeover (prepended to
-- each). Not a script of its own.
--
-- KEYS     none of its own: next_fence takes the job's fence key
-- Returns  next_fence returns the job's next fencing token
--
-- A fence is one more than the job's last, and at least Redis's clock in
-- microseconds. So fences keep growing when the counter is lost: after a
-- restart without persistence, or a failover to a replica that had not
-- received it (provided the Redis hosts' clocks are in step). Fences stay
-- below 2^53, exact in Lua's numbers, until the year 2255.
local function next_fence(key, now_us)
  local f = math.max((tonumber(redis.call('GET', key)) or 0) + 1, now_us)
  redis.call('SET', key, string.format('%.0f', f))
  return f
end
