-- claim: claim slots of jobs for a replica, or learn who has them. One
-- call claims any number of slots; each is decided on its own, in order. (A
-- replica sends all the claims due at one instant in one call on a single
-- Redis, and one call per hash slot on a Cluster.)
--
-- KEYS     7 per claim, claim i at KEYS[7*(i-1)+1 .. 7*(i-1)+7]:
--   +1  the slot record: a hash (slot, owner, token, attempt, fence, state,
--       lease, started, finished, error), kept for the retention and never
--       deleted by a finish, so a finished slot stays closed. lease names
--       the lease its run holds: "job" or "slot" (+2)
--   +2  the lease: a string "<token> <slot> <replica>" with the lease TTL;
--       the job's one lease when overlap is "skip", the slot's own when "allow"
--   +3  the job's fence counter (never expires; see fence_lib.lua)
--   +4  the job's run history: a stream capped at about ARGV[2] entries, of
--       slots' ends (a claim that wins adds nothing: the running set has it)
--   +5  the job's high-water mark: a sorted set whose one member, "last",
--       scores the latest slot (unix s) that has a record
--   +6  the job's running slots: a sorted set of the slots (unix s) whose
--       records are running, so that a restarted replica settles them all;
--       a manual slot's member is its reference (below), scored by its time
--   +7  the job's pause: a hash (note, by, at) while the job is paused
-- ARGV[1]  the replica ID
-- ARGV[2]  the history's approximate maximum length
-- ARGV[3]  the number of profiles, P
-- ARGV     then 8 per profile (what claims of one job share), profile p
--          from ARGV[3+8*(p-1)+1]:
--   +1  the lease TTL, ms
--   +2  the record's retention, ms
--   +3  "skip": a run of the job in progress blocks the slot; "allow": it does not
--   +4  the mode: "live" records a skipped or missed slot; "wait" (catch-up)
--       answers busy instead of recording skipped and has no deadline;
--       "miss" records the slot missed unless it has a record; "expire"
--       records it missed, unless it has a record, once its deadline has
--       passed, and answers early before that; "manual" claims a manual
--       slot: like "live", with no deadline; "ahead": like "live", for a
--       claim sent before the slot's time (its run waits for it): a run in
--       progress answers busy and records nothing, and a won record's
--       started is the slot's time
--   +5  the reason recorded with a missed slot
--   +6  mode "live": the most the slot may be ahead of Redis's clock, ms (the
--       claimant's max_skew); a claim earlier than that is refused, with
--       nothing recorded. 0: no limit
--   +7  mode "manual": who asked for the slot ("" otherwise)
--   +8  mode "manual": their note
-- ARGV     then 5 per claim, claim i from ARGV[3+8*P+5*(i-1)+1]:
--   +1  the slot: unix seconds, or for a manual slot its reference "m:<id>"
--   +2  the deadline: the latest start, ms on Redis's clock (mode "live")
--   +3  the claim's profile, 1..P
--   +4  the claim's token: the run's token if it wins. A claim sent again
--       after its reply was lost carries the same token, and is answered as
--       the same claim: won again, with its lease's TTL restored.
--   +5  the run's ID, if it wins (a UUIDv7; "" for modes "miss" and "expire")
--
-- Returns one reply per claim, in order, each one of
--   {"won", fence, attempt, run_id}              this replica runs the slot (run_id: the
--                                                record's, for a claim sent again)
--   {"lost", owner, state, fence, attempt}       the slot has a record (owner is this
--                                                replica for a retried claim whose run
--                                                lost the job's lease meanwhile)
--   {"skipped", holder, holder_slot, pttl}       recorded: the run of holder_slot holds the lease
--                                                (holder_slot: unix s, or a manual slot's "m:<id>")
--   {"busy", holder, pttl, holder_slot}          modes "wait" and "ahead": a run holds the lease;
--                                                nothing recorded
--   {"missed", late_ms}                          recorded: past the deadline, or mode "miss"
--   {"paused", why}                              recorded paused (modes "live" and "wait"): the
--                                                job's pause stands; why quotes it
--   {"early", ms}                                nothing recorded: the slot is that far ahead
--                                                (mode "live"), or its deadline is (mode "expire")
local replica, maxlen = ARGV[1], ARGV[2]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])

-- manual: for a manual slot ("m:<id>"), the fields its record has besides
-- a scheduled slot's; nil for a scheduled one. A manual slot does not move
-- the high-water mark: that counts scheduled slots only.
local manual_by, manual_note = nil, nil
local function manual_fields(rec, slot)
  if string.sub(slot, 1, 2) ~= 'm:' then
    return false
  end
  redis.call('HSET', rec, 'kind', 'manual', 'at', now, 'by', manual_by, 'note', manual_note)
  return true
end

-- close_unrun records a slot that will not run (missed or skipped).
local function close_unrun(rec, runs, last, slot, retention, state, why)
  redis.call('HSET', rec, 'slot', slot, 'owner', replica, 'state', state, 'finished', now, 'error', why)
  redis.call('PEXPIRE', rec, retention)
  if not manual_fields(rec, slot) then
    redis.call('ZADD', last, 'GT', slot, 'last')
  end
  redis.call('XADD', runs, 'MAXLEN', '~', maxlen, '*', 'slot', slot, 'event', state, 'replica', replica, 'error', why)
end

-- retried answers a claim sent again after its reply was lost: the record is
-- this claim's (same token). Its lease gets its TTL back, if it is still the
-- run's or free; if another run took the job meanwhile, the record is this
-- replica's with no lease behind it: lost, for a takeover to settle.
local function retried(lease, token, slot, ttl, f, attempt, run_id)
  local value = token .. ' ' .. slot .. ' ' .. replica
  local v = redis.call('GET', lease)
  if v == value then
    redis.call('PEXPIRE', lease, ttl)
  elseif v or not redis.call('SET', lease, value, 'PX', ttl, 'NX') then
    return {'lost', replica, 'running', f, attempt}
  end
  return {'won', f, attempt, run_id}
end

local function claim(rec, lease, fence, runs, last, running, paused, token, slot, ttl, retention, overlap, mode, deadline, reason, early, run_id)
  local r = redis.call('HMGET', rec, 'owner', 'state', 'token', 'fence', 'attempt', 'run_id')
  if r[2] then
    local f, attempt = tonumber(r[4] or '0') or 0, tonumber(r[5] or '0') or 0
    if r[1] == replica and r[2] == 'running' and r[3] == token then
      return retried(lease, token, slot, ttl, f, attempt, r[6] or run_id)
    end
    return {'lost', r[1] or '', r[2], f, attempt}
  end

  local late = 0
  if mode ~= 'manual' then
    late = now - tonumber(slot) * 1000
  end
  if mode == 'miss' then
    close_unrun(rec, runs, last, slot, retention, 'missed', reason)
    return {'missed', late}
  end
  if mode == 'expire' then
    if now <= tonumber(deadline) then
      return {'early', tonumber(deadline) - now + 1}
    end
    close_unrun(rec, runs, last, slot, retention, 'missed', reason)
    return {'missed', late}
  end
  local live = mode == 'live' or mode == 'ahead'
  if live and tonumber(early) > 0 and -late > tonumber(early) then
    return {'early', -late}
  end
  local pause = redis.call('HMGET', paused, 'note', 'by')
  if pause[2] then
    local why = 'paused by ' .. pause[2]
    if pause[1] and pause[1] ~= '' then
      why = why .. ': ' .. pause[1]
    end
    close_unrun(rec, runs, last, slot, retention, 'paused', why)
    return {'paused', why}
  end
  if live and now > tonumber(deadline) then
    close_unrun(rec, runs, last, slot, retention, 'missed', reason .. ': ' .. late .. 'ms after the slot, past the misfire grace')
    return {'missed', late}
  end
  local value = token .. ' ' .. slot .. ' ' .. replica
  if overlap == 'skip' then
    if not redis.call('SET', lease, value, 'PX', ttl, 'NX') then -- a run holds the job
      local _, hslot, holder = string.match(redis.call('GET', lease), '^(%S+) (%S+) (.*)$')
      local pttl = redis.call('PTTL', lease)
      if mode == 'wait' or mode == 'ahead' then
        return {'busy', holder or '', pttl, hslot or ''}
      end
      close_unrun(rec, runs, last, slot, retention, 'skipped',
        'overlap: the run of slot ' .. (hslot or '?') .. ' on ' .. (holder or '?') .. ' still holds the job')
      return {'skipped', holder or '', hslot or '', pttl}
    end
  else
    redis.call('SET', lease, value, 'PX', ttl)
  end

  local f = next_fence(fence, now_us)
  local kind = 'job'
  if overlap ~= 'skip' then
    kind = 'slot'
  end
  local started = now
  if mode == 'ahead' and late < 0 then -- the run waits for the slot's time
    started = now - late
  end
  redis.call('HSET', rec, 'slot', slot, 'owner', replica, 'token', token, 'attempt', 1,
    'fence', string.format('%.0f', f), 'state', 'running', 'lease', kind, 'started', started, 'run_id', run_id)
  redis.call('PEXPIRE', rec, retention)
  if manual_fields(rec, slot) then
    redis.call('ZADD', running, math.floor(now / 1000), slot)
  else
    redis.call('ZADD', last, 'GT', slot, 'last')
    redis.call('ZADD', running, slot, slot)
  end
  return {'won', f, 1, run_id}
end

local profiles, np = {}, tonumber(ARGV[3])
for p = 1, np do
  local a = 3 + 8 * (p - 1)
  profiles[p] = {ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[a + 6], ARGV[a + 7], ARGV[a + 8]}
end
local out, first = {}, 3 + 8 * np
for i = 1, #KEYS / 7 do
  local k, a = 7 * (i - 1), first + 5 * (i - 1)
  local p = profiles[tonumber(ARGV[a + 3])]
  manual_by, manual_note = p[7], p[8]
  out[i] = claim(KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], KEYS[k + 5], KEYS[k + 6], KEYS[k + 7],
    ARGV[a + 4], ARGV[a + 1], p[1], p[2], p[3], p[4], ARGV[a + 2], p[5], p[6], ARGV[a + 5])
end
return out
