-- slot_takeover: settle a running slot whose owner may have lost its lease.
-- With on_owner_lost "retry", take the slot over as attempt+1, with a new token
-- and a new fence; otherwise (or past the attempt limit) record it abandoned.
--
-- KEYS[1]  the slot record
-- KEYS[2]  the lease hash (the job's, or the slot's when overlap is allowed)
-- KEYS[3]  the job's fence counter
-- KEYS[4]  the job's run history stream
-- ARGV[1]  the token for the new attempt
-- ARGV[2]  the replica ID
-- ARGV[3]  the slot, unix seconds
-- ARGV[4]  the lease TTL, ms
-- ARGV[5]  the record's retention, ms
-- ARGV[6]  "retry" or "abandon"
-- ARGV[7]  the attempt limit (max_attempts)
-- ARGV[8]  the history's approximate maximum length
--
-- Returns one of
--   {"won", fence, attempt}         this replica runs attempt+1 of the slot
--   {"alive", pttl}                 the owner still holds its lease (PTTL ms)
--   {"busy", holder, pttl}          "retry": another run holds the job's lease; try after pttl
--   {"abandoned", owner, attempt}   recorded abandoned
--   {"closed", state, owner}        the slot is no longer running: nothing to do
--   {"gone"}                        the slot has no record
local rec, lease, fence, runs = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, replica, slot = ARGV[1], ARGV[2], ARGV[3]
local r = redis.call('HMGET', rec, 'state', 'token', 'owner', 'attempt')
if r[1] == false then
  return {'gone'}
end
local state, rtok, owner, attempt = r[1], r[2] or '', r[3] or '', tonumber(r[4] or '1') or 1
if state ~= 'running' then
  return {'closed', state, owner}
end
if rtok == token then -- a retried takeover of ours
  return {'won', tonumber(redis.call('HGET', rec, 'fence')), attempt}
end
local ltok = redis.call('HGET', lease, 'token')
if ltok == rtok then
  return {'alive', redis.call('PTTL', lease)}
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[6] == 'retry' and attempt < tonumber(ARGV[7]) then
  if ltok then
    return {'busy', redis.call('HGET', lease, 'replica') or '', redis.call('PTTL', lease)}
  end
  local f = redis.call('INCR', fence)
  redis.call('HSET', rec, 'owner', replica, 'token', token, 'attempt', attempt + 1, 'fence', f,
    'started', now, 'error', 'attempt ' .. attempt .. ' on ' .. owner .. ' lost its lease')
  redis.call('PEXPIRE', rec, ARGV[5])
  redis.call('HSET', lease, 'token', token, 'replica', replica, 'slot', slot)
  redis.call('PEXPIRE', lease, ARGV[4])
  redis.call('XADD', runs, 'MAXLEN', '~', ARGV[8], '*', 'slot', slot, 'event', 'takeover',
    'replica', replica, 'attempt', tostring(attempt + 1), 'fence', tostring(f), 'previous', owner)
  return {'won', f, attempt + 1}
end
local why = 'owner ' .. owner .. ' lost its lease during attempt ' .. attempt
if ARGV[6] == 'retry' then
  why = why .. ', the last of ' .. ARGV[7]
end
redis.call('HSET', rec, 'state', 'abandoned', 'finished', now, 'error', why)
redis.call('PEXPIRE', rec, ARGV[5])
redis.call('XADD', runs, 'MAXLEN', '~', ARGV[8], '*', 'slot', slot, 'event', 'abandoned',
  'replica', replica, 'attempt', tostring(attempt), 'error', why)
return {'abandoned', owner, attempt}
