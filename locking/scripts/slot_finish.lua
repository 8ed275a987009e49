-- slot_finish: record how a run ended and free the job's lease. The record is
-- kept for the retention, never deleted, so the slot stays closed.
--
-- KEYS[1]  the slot record
-- KEYS[2]  the lease hash
-- KEYS[3]  the job's run history stream
-- ARGV[1]  the run's token
-- ARGV[2]  the final state: "done", "failed" or "abandoned"
-- ARGV[3]  the error text ("" for none)
-- ARGV[4]  the record's retention, ms
-- ARGV[5]  the history's approximate maximum length
-- ARGV[6]  the replica ID
--
-- Returns {1} when the record was this run's and now holds the final state (a
--         retried finish of the same state also returns {1});
--         {0, state} when the record is no longer this run's or no longer
--         running (taken over, or recorded abandoned by another replica):
--         nothing changes.
local r = redis.call('HMGET', KEYS[1], 'token', 'state', 'slot', 'attempt')
local state = r[2] or 'gone'
if r[1] ~= ARGV[1] then
  return {0, state}
end
if state ~= 'running' then
  if state == ARGV[2] then
    return {1}
  end
  return {0, state}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'finished', now, 'error', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
if redis.call('HGET', KEYS[2], 'token') == ARGV[1] then
  redis.call('DEL', KEYS[2])
end
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[5], '*', 'slot', r[3], 'event', ARGV[2],
  'replica', ARGV[6], 'attempt', r[4], 'error', ARGV[3])
return {1}
