-- takeover: settle running slots whose owners may have lost their leases.
-- With on_owner_lost "retry", take a slot over as attempt+1, with a new token
-- and a new fence; otherwise (or past the attempt limit) record it abandoned,
-- with a new fence too, so that the record's fence is no longer the lost
-- owner's. The owner is judged by the lease its record names, whatever the
-- caller's own overlap setting (replicas may disagree mid-deploy). One call
-- settles any number of slots, each on its own, in order.
--
-- KEYS     6 per slot, slot i at KEYS[6*(i-1)+1 .. 6*(i-1)+6]:
--   +1  the slot record (its "lease" field names +2 or +3)
--   +2  the job's lease: a string "<token> <slot> <replica>"
--   +3  the slot's own lease (overlap allowed), same shape
--   +4  the job's fence counter (see fence_lib.lua)
--   +5  the job's run history stream
--   +6  the job's running slots (a sorted set): a settled slot leaves it
-- ARGV[1]  the replica ID
-- ARGV[2]  the history's approximate maximum length
-- ARGV     then 7 per slot, slot i from ARGV[2+7*(i-1)+1]:
--   +1  the token for the new attempt
--   +2  the slot, unix seconds, or a manual slot's reference "m:<id>"
--   +3  the lease TTL, ms
--   +4  the record's retention, ms
--   +5  "retry" or "abandon"
--   +6  the attempt limit (max_attempts)
--   +7  the new attempt's run ID (a UUIDv7)
--
-- Returns one reply per slot, in order, each one of
--   {"won", fence, attempt, lease, run_id} this replica runs attempt+1; lease is "job" or "slot"
--   {"alive", pttl}                        the owner still holds its lease (PTTL ms)
--   {"busy", holder, pttl, holder_slot}    "retry": another run (of holder_slot) holds the job's
--                                          lease; try after pttl
--   {"abandoned", owner, attempt, fence}   recorded abandoned, with a new fence
--   {"closed", state, owner}               the slot is no longer running: nothing to do
--   {"gone"}                               the slot has no record
local replica, maxlen = ARGV[1], ARGV[2]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])

local function settle(rec, joblease, slotlease, fence, runs, running, token, slot, ttl, retention, policy, limit, run_id)
  local r = redis.call('HMGET', rec, 'state', 'token', 'owner', 'attempt', 'lease', 'run_id')
  if r[1] == false then
    redis.call('ZREM', running, slot)
    return {'gone'}
  end
  local state, rtok, owner, attempt = r[1], r[2] or '', r[3] or '', tonumber(r[4] or '1') or 1
  if state ~= 'running' then
    redis.call('ZREM', running, slot)
    return {'closed', state, owner}
  end
  local kind, lease = r[5] or 'job', joblease
  if kind == 'slot' then
    lease = slotlease
  end
  if rtok == token then -- a retried takeover of ours
    return {'won', tonumber(redis.call('HGET', rec, 'fence')), attempt, kind, r[6] or run_id}
  end
  local v = redis.call('GET', lease)
  local ltok, hslot, holder
  if v then
    ltok, hslot, holder = string.match(v, '^(%S+) (%S+) (.*)$')
  end
  if v and ltok == rtok then
    return {'alive', redis.call('PTTL', lease)}
  end
  local f = next_fence(fence, now_us)
  if policy == 'retry' and attempt < tonumber(limit) then
    if v then
      return {'busy', holder or '', redis.call('PTTL', lease), hslot or ''}
    end
    redis.call('HSET', rec, 'owner', replica, 'token', token, 'attempt', attempt + 1, 'run_id', run_id,
      'fence', string.format('%.0f', f), 'started', now, 'error', 'attempt ' .. attempt .. ' on ' .. owner .. ' lost its lease')
    redis.call('PEXPIRE', rec, retention)
    redis.call('SET', lease, token .. ' ' .. slot .. ' ' .. replica, 'PX', ttl)
    redis.call('XADD', runs, 'MAXLEN', '~', maxlen, '*', 'slot', slot, 'event', 'takeover',
      'replica', replica, 'attempt', tostring(attempt + 1), 'fence', string.format('%.0f', f), 'previous', owner,
      'run_id', run_id)
    return {'won', f, attempt + 1, kind, run_id}
  end
  local why = 'owner ' .. owner .. ' lost its lease during attempt ' .. attempt
  if policy == 'retry' then
    why = why .. ', the last of ' .. limit
  end
  redis.call('HSET', rec, 'state', 'abandoned', 'fence', string.format('%.0f', f), 'finished', now, 'error', why)
  redis.call('PEXPIRE', rec, retention)
  redis.call('ZREM', running, slot)
  redis.call('XADD', runs, 'MAXLEN', '~', maxlen, '*', 'slot', slot, 'event', 'abandoned',
    'replica', replica, 'attempt', tostring(attempt), 'fence', string.format('%.0f', f), 'error', why)
  return {'abandoned', owner, attempt, f}
end

local out = {}
for i = 1, #KEYS / 6 do
  local k, a = 6 * (i - 1), 2 + 7 * (i - 1)
  out[i] = settle(KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], KEYS[k + 5], KEYS[k + 6],
    ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[a + 6], ARGV[a + 7])
end
return out
