-- slot_claim: claim one slot of a job for a replica, or learn who has it.
--
-- KEYS[1]  the slot record: a hash (slot, owner, token, attempt, fence, state,
--          started, finished, error), kept for the retention and never
--          deleted by a finish, so a finished slot stays closed
-- KEYS[2]  the lease: a hash (token, replica, slot) with the lease TTL; the
--          job's one lease when overlap is "skip", this slot's own when "allow"
-- KEYS[3]  the job's fence counter (never expires)
-- KEYS[4]  the job's run history: a stream capped at about ARGV[10] entries
-- KEYS[5]  the job's high-water mark: the latest slot (unix s) with a record
-- ARGV[1]  this claim's token (random; a retried claim sends the same one)
-- ARGV[2]  the replica ID
-- ARGV[3]  the slot, unix seconds
-- ARGV[4]  the lease TTL, ms
-- ARGV[5]  the record's retention, ms
-- ARGV[6]  "skip": a run of the job in progress blocks the slot; "allow": it does not
-- ARGV[7]  the mode: "live" records a skipped or missed slot; "wait" (catch-up)
--          answers busy instead of recording skipped and has no deadline;
--          "miss" records the slot missed unless it has a record
-- ARGV[8]  the deadline: the latest start, ms on Redis's clock (mode "live")
-- ARGV[9]  the reason recorded with a missed slot
-- ARGV[10] the history's approximate maximum length
--
-- Returns one of
--   {"won", fence, attempt}                     this replica runs the slot
--   {"lost", owner, state, fence, attempt, pttl} the slot has a record; pttl is
--        the owner's lease PTTL in ms while it is running and holds it, else -2
--   {"skipped", holder, holder_slot}            recorded: a run of the job holds the lease
--   {"busy", holder, pttl}                      mode "wait": a run holds the lease; nothing recorded
--   {"missed", late_ms}                         recorded: past the deadline, or mode "miss"
local rec, lease, fence, runs, last = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, replica, slot = ARGV[1], ARGV[2], ARGV[3]
local ttl, retention, overlap, mode = ARGV[4], ARGV[5], ARGV[6], ARGV[7]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function raise_last()
  local cur = tonumber(redis.call('GET', last) or '0')
  if tonumber(slot) > cur then
    redis.call('SET', last, slot)
  end
end

local function history(event, extra)
  local fields = {'slot', slot, 'event', event, 'replica', replica}
  for _, v in ipairs(extra or {}) do
    fields[#fields + 1] = v
  end
  redis.call('XADD', runs, 'MAXLEN', '~', ARGV[10], '*', unpack(fields))
end

local function close_unrun(state, why)
  redis.call('HSET', rec, 'slot', slot, 'owner', replica, 'state', state, 'finished', now, 'error', why)
  redis.call('PEXPIRE', rec, retention)
  raise_last()
  history(state, {'error', why})
end

if redis.call('EXISTS', rec) == 1 then
  local r = redis.call('HMGET', rec, 'owner', 'state', 'token', 'fence', 'attempt')
  local owner, state = r[1] or '', r[2] or ''
  local f, attempt = tonumber(r[4] or '0') or 0, tonumber(r[5] or '0') or 0
  if r[3] == token and state == 'running' then -- a retried claim of ours
    return {'won', f, attempt}
  end
  local pttl = -2
  if state == 'running' and redis.call('HGET', lease, 'token') == r[3] then
    pttl = redis.call('PTTL', lease)
  end
  return {'lost', owner, state, f, attempt, pttl}
end

if mode == 'miss' then
  close_unrun('missed', ARGV[9])
  return {'missed', now - tonumber(slot) * 1000}
end
if mode == 'live' and now > tonumber(ARGV[8]) then
  local late = now - tonumber(slot) * 1000
  close_unrun('missed', ARGV[9] .. ': ' .. late .. 'ms after the slot, past the misfire grace')
  return {'missed', late}
end

if overlap == 'skip' and redis.call('EXISTS', lease) == 1 then
  local h = redis.call('HMGET', lease, 'replica', 'slot')
  local holder, hslot = h[1] or '', h[2] or ''
  if mode == 'wait' then
    return {'busy', holder, redis.call('PTTL', lease)}
  end
  close_unrun('skipped', 'overlap: the run of slot ' .. hslot .. ' on ' .. holder .. ' still holds the job')
  return {'skipped', holder, hslot}
end

local f = redis.call('INCR', fence)
redis.call('HSET', rec, 'slot', slot, 'owner', replica, 'token', token, 'attempt', 1,
  'fence', f, 'state', 'running', 'started', now)
redis.call('PEXPIRE', rec, retention)
redis.call('HSET', lease, 'token', token, 'replica', replica, 'slot', slot)
redis.call('PEXPIRE', lease, ttl)
raise_last()
history('claimed', {'attempt', '1', 'fence', tostring(f)})
return {'won', f, 1}
