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
--
-- One call in the usual case: the clock has moved on since the last fence,
-- so Redis's time is the next one (SET ... GET writes it and returns the
-- last); only when the counter is at or past it (claims of one job within a
-- microsecond, or a clock behind the counter) is it set again, to last + 1.
local function next_fence(key, now_us)
  local last = tonumber(redis.call('SET', key, string.format('%.0f', now_us), 'GET')) or 0
  if last + 1 <= now_us then
    return now_us
  end
  redis.call('SET', key, string.format('%.0f', last + 1))
  return last + 1
end
