-- finish: record how runs ended and free their leases. A record is kept
-- for the retention, never deleted, so a finished slot stays closed. One call
-- finishes any number of runs, each on its own, in order.
--
-- KEYS     4 per run, run i at KEYS[4*(i-1)+1 .. 4*(i-1)+4]:
--   +1  the slot record
--   +2  the lease: a string "<token> <slot> <replica>"
--   +3  the job's run history stream
--   +4  the job's running slots (a sorted set): the slot leaves it
-- ARGV[1]  the history's approximate maximum length
-- ARGV     then 6 per run, run i from ARGV[1+6*(i-1)+1]:
--   +1  the run's token
--   +2  the final state: "done", "failed" or "abandoned"
--   +3  the error text ("" for none)
--   +4  the record's retention, ms
--   +5  the replica ID
--   +6  the run's result ("" for none)
--
-- Returns one reply per run, in order:
--   {1}         the record was this run's and now holds the final state (a
--               retried finish of the same state also answers {1})
--   {0, state}  the record is no longer this run's, or no longer running
--               (taken over, or recorded abandoned by another replica):
--               nothing changes
local maxlen = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function finish(rec, lease, runs, running, token, state, err, retention, replica, result)
  local r = redis.call('HMGET', rec, 'token', 'state', 'slot', 'attempt')
  local cur = r[2] or 'gone'
  if r[1] ~= token then
    return {0, cur}
  end
  if cur ~= 'running' then
    if cur == state then
      return {1}
    end
    return {0, cur}
  end
  redis.call('HSET', rec, 'state', state, 'finished', now, 'error', err, 'result', result)
  redis.call('PEXPIRE', rec, retention)
  redis.call('ZREM', running, r[3])
  local v = redis.call('GET', lease)
  if v and string.sub(v, 1, #token + 1) == token .. ' ' then
    redis.call('DEL', lease)
  end
  redis.call('XADD', runs, 'MAXLEN', '~', maxlen, '*', 'slot', r[3], 'event', state,
    'replica', replica, 'attempt', r[4], 'error', err)
  return {1}
end

local out = {}
for i = 1, #KEYS / 4 do
  local k, a = 4 * (i - 1), 1 + 6 * (i - 1)
  out[i] = finish(KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[a + 6])
end
return out
