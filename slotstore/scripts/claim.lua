-- claim: claim slots of jobs for a replica, or learn who has them. One
-- call claims any number of slots; each is decided on its own, in order. (A
-- replica sends all the claims due at one instant in one call on a single
-- Redis, and one call per hash slot on a Cluster.) record_lib.lua, prepended,
-- has the record's format and the job state's fields.
--
-- KEYS     3 per claim, claim i at KEYS[3*i-2 .. 3*i]:
--   +1  the slot record: a string, kept for the retention and never deleted
--       by a finish, so a finished slot stays closed (a protocol-1 record, a
--       hash, counts as a record too)
--   +2  the job's state: a hash (lease, fence, last, running, ends, pause)
--   +3  the job's ended ring: a hash (a slot recorded missed, skipped or
--       paused has ended)
-- ARGV[1]  the replica ID
-- ARGV[2]  the number of profiles, P
-- ARGV     then 10 per profile (what claims of one job share), profile p
--          from ARGV[2+10*(p-1)+1]:
--   +1  the lease TTL, ms
--   +2  the record's retention, ms
--   +3  "skip": a run of the job in progress blocks the slot (the job's
--       lease); "allow": it does not (each slot has a lease of its own)
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
--   +6  modes "live", "ahead" and "wait": the most the slot may be ahead of
--       Redis's clock, ms (the claimant's max_skew); a claim earlier than
--       that is refused, with nothing recorded. Mode "wait" (a backfill) also
--       refuses, recording nothing, a slot older than the retention less
--       this: its records were first written no earlier than this before
--       it, so they may have expired since, and a slot that ran would run
--       again. 0: no limit
--   +7  mode "manual": who asked for the slot ("" otherwise)
--   +8  mode "manual": their note
--   +9  "1": read the slot's record before anything else (a contested claim:
--       other replicas claim the slot at the same instant), so that a claim
--       that finds another's record costs one read; "0": read it only when
--       a write finds it. The answer is the same either way.
--   +10 mode "wait" with an early limit (a backfill): "1": a slot recorded
--       missed is claimed as if it had no record, its record becoming the
--       run's (a missed record is written only where no claim had won the
--       slot: no run of it ever started); "0": a missed record is a record
--       like any other. Every other record answers lost either way
-- ARGV     then 5 per claim, claim i from ARGV[2+10*P+5*(i-1)+1]:
--   +1  the slot's ref: unix seconds, or for a manual slot "m:<id>"
--   +2  the deadline: the latest start, ms on Redis's clock (mode "live")
--   +3  the claim's profile, 1..P
--   +4  the claim's token: the run's token if it wins. A claim sent again
--       after its reply was lost carries the same token, and is answered as
--       the same claim: won again, with its lease's TTL restored.
--   +5  the won record from its lease on: "<lease> <token> <run_id> <ref> "
--       and its five texts (record.go's claimTail); the script writes
--       "running <fence> 1 <started> 0 <at> " in front of it
--
-- Returns one reply per claim, in order, each one of
--   {"won", fence, attempt, run_id, started}     this replica runs the slot (run_id: the
--                                                record's for a claim sent again, else "";
--                                                started: ms, the record's)
--   {"won", ..., by, note}                       a backfill's claim won over a missed record:
--                                                by and note, the record's too, keep who
--                                                recorded the slot missed and why
--   {"lost", owner, state, fence, attempt}       the slot has a record (owner is this
--                                                replica for a retried claim whose run
--                                                lost the job's lease meanwhile); for a
--                                                backfill's claim (+10), one not missed
--   {"skipped", holder, holder_slot, pttl}       recorded: the run of holder_slot holds the lease,
--                                                or a retry of holder_slot has the job's turn
--                                                (record_lib.lua; holder: the replica that
--                                                will run it) (holder_slot: unix s, or a
--                                                manual slot's "m:<id>")
--   {"busy", holder, pttl, holder_slot}          modes "wait" and "ahead", and "live" before the
--                                                slot's time: a run holds the lease; nothing
--                                                recorded
--   {"missed", late_ms}                          recorded: past the deadline, or mode "miss"
--   {"paused", why}                              recorded paused (modes "live" and "wait"): the
--                                                job's pause stands; why quotes it
--   {"early", ms}                                nothing recorded: the slot is that far ahead
--                                                (modes "live", "ahead", "wait"), or its
--                                                deadline is (mode "expire")
--   {"old", late_ms, kept_ms}                    nothing recorded (mode "wait"): the slot is
--                                                that far behind, past how long its records
--                                                are kept less the early limit: the
--                                                retention, or kept_ms, a shorter one the
--                                                job's records were written with lately
--                                                (record_lib.lua's rets)
local replica = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
-- The clock as the record's texts write it, formatted once per call: a
-- number written into a string costs a sprintf each time.
local now_s, now_us_s = tostring(now), string.format('%.0f', now_us)

-- found reads the record of a slot that has one: a protocol-2 string's
-- fields, or a protocol-1 hash's.
local function found(rec, v)
  if v then
    return head(v) or {owner = '?', state = 'unknown', fence = '0', attempt = '0', token = '', run_id = '', started = '0'}
  end
  local h = redis.call('HMGET', rec, 'owner', 'state', 'fence', 'attempt', 'token')
  return {owner = h[1] or '', state = h[2] or 'unknown', fence = h[3] or '0', attempt = h[4] or '0', token = h[5] or '', run_id = '', started = '0'}
end

-- peek returns the record of a slot, or nil when it has none, changing
-- nothing; and GET's reply: the record's text, or an error table for a
-- protocol-1 hash.
local function peek(rec)
  local v = redis.pcall('GET', rec)
  if type(v) == 'table' then
    return found(rec, nil), v
  end
  if not v then
    return nil
  end
  return found(rec, v), v
end

-- create writes content to rec, with the retention, unless the slot has a
-- record: nil when written, else the record found, which is not changed.
-- (SET NX, then a read when it did not write: SET's NX and GET together
-- need Redis 7.0, and slotcron runs on 6.2.)
local function create(rec, content, retention)
  if redis.call('SET', rec, content, 'NX', 'PX', retention) then
    return nil
  end
  return peek(rec)
end

-- mine reports whether the record r is the one this claim wrote (its reply
-- was lost and it is sent again).
local function mine(r, token)
  return r.owner == replica and r.state == 'running' and r.token == token
end

-- closed_mine reports whether the record r is one this claim wrote as it
-- closed the slot (missed, skipped or paused), its reply lost and the claim
-- sent again: such a record keeps the claim's token (close).
local function closed_mine(r, token)
  return token ~= '' and r.token == token and r.owner == replica and
    (r.state == 'missed' or r.state == 'skipped' or r.state == 'paused')
end

-- closed_again is the reply to a claim sent again whose first try closed the
-- slot (closed_mine): the first reply, rebuilt from the record, so that its
-- replica reports the slot as that reply would have had it (a missed
-- slot's event). A skipped slot names the run that holds the job now, if
-- one does. nil when the record does not read (a protocol-1 hash).
local function closed_again(rec, r, ref, lref, luntil, lholder)
  local v = redis.pcall('GET', rec)
  local m = type(v) == 'string' and parse(v)
  if not m then
    return nil
  end
  if r.state == 'missed' then
    local late = 0
    if string.sub(ref, 1, 2) ~= 'm:' then
      late = (tonumber(m.finished) or 0) - tonumber(ref) * 1000
    end
    return {'missed', late}
  elseif r.state == 'paused' then
    return {'paused', m.err}
  end
  if lholder and luntil > now then
    return {'skipped', lholder, lref, luntil - now}
  end
  return {'skipped', '', '', 0}
end

-- lost is the reply to a claim whose slot has the record r, not its own.
local function lost(r)
  return {'lost', r.owner, r.state, tonumber(r.fence) or 0, tonumber(r.attempt) or 0}
end

-- stands reports whether the record r stands in the way of a claim: every
-- record does, but a missed one for a backfill's claim (over_missed).
local function stands(r, over_missed)
  return not (over_missed and r.state == 'missed')
end

-- lease is the value of a won lease: the run's token, its slot's ref, its
-- end (until_s: ms on Redis's clock, formatted once per profile) and owner.
local function lease(token, ref, until_s)
  return token .. ' ' .. ref .. ' ' .. until_s .. ' ' .. replica
end

-- answer is the reply to a claim whose slot has the record r: lost, unless r
-- is this claim's own (its reply was lost and it is sent again): then won
-- again, the lease's TTL restored, if no other run holds the job meanwhile.
-- A scheduled slot's record that a backfill won over a missed one keeps
-- what the missed record said as its by and note: they go with the reply
-- (the finish writes the record from the lease).
local function answer(rec, st, lf, r, token, ref, until_s, skip, ltok, luntil, lref, lholder)
  if closed_mine(r, token) then
    local a = closed_again(rec, r, ref, lref, luntil, lholder)
    if a then
      return a
    end
  end
  if not mine(r, token) then
    return lost(r)
  end
  if skip and ltok and ltok ~= token and luntil > now then
    return lost(r)
  end
  redis.call('HSET', st, lf, lease(token, ref, until_s))
  local a = {'won', tonumber(r.fence), tonumber(r.attempt), r.run_id, tonumber(r.started)}
  if string.sub(ref, 1, 2) ~= 'm:' then
    local v = redis.pcall('GET', rec)
    local m = type(v) == 'string' and parse(v)
    if m and (m.by ~= '' or m.note ~= '') then
      a[6], a[7] = m.by, m.note
    end
  end
  return a
end

-- close records a slot that will not run (missed, skipped or paused), unless
-- it has a record: nil when recorded, else the record found.
local function close(rec, st, ring, j, ref, manual, at, retention, state, why, by, note, token)
  local tok = token
  if tok == '' then
    tok = '-'
  end
  local r = create(rec, record(state, '0', 0, 0, now, at, '-', tok, '-', ref, replica, why, '', by, note), retention)
  if r then
    return r
  end
  marked(st, j[9], retention, now)
  local ef, ends = ended_at(j[7])
  redis.call('HSET', ring, ef, ref)
  if not manual and tonumber(ref) > (tonumber(j[3]) or 0) then
    redis.call('HSET', st, 'ends', ends, 'last', ref)
  else
    redis.call('HSET', st, 'ends', ends)
  end
  return nil
end

local function claim(rec, st, ring, ref, deadline, p, token, tail)
  local retention, skip, mode, reason, early, by, note, until_s = p[2], p[3] == 'skip', p[4], p[5], p[6], p[7], p[8], p[11]
  -- (Claim in Go allows it only with mode "wait" and an early limit, for a
  -- scheduled slot: checked again here, so that no other claim ever wins
  -- over a missed record.)
  local over_missed = p[10] == '1' and mode == 'wait' and tonumber(early) > 0 and string.sub(ref, 1, 2) ~= 'm:'
  if p[9] == '1' then
    -- Every path below answers lost to a record that is not this claim's
    -- own, and stands in its way, and reads the record before it writes
    -- anything: reading it first answers the same, and spares the state's
    -- read and the record's write.
    local r = peek(rec)
    if r and not mine(r, token) and not closed_mine(r, token) and stands(r, over_missed) then
      return lost(r)
    end
  end
  local manual = string.sub(ref, 1, 2) == 'm:'
  local lf = 'lease'
  if not skip then
    lf = 'lease:' .. ref
  end
  local j = redis.call('HMGET', st, lf, 'fence', 'last', 'running', 'paused_by', 'paused_note', 'ends', 'turn', 'rets')
  local ltok, lref, luntil, lholder = lease_of(j[1])
  local turn = false
  if skip and j[8] and not (ltok and luntil > now) then
    -- A retry of a slot whose owner died waits for its turn: the job is
    -- held for it (takeover.lua).
    local ttok, tref, tuntil, tholder = turn_of(j[8], ref, now)
    if ttok then
      ltok, lref, luntil, lholder, turn = ttok, tref, tuntil, tholder, true
    end
  end
  local late, at = 0, 0
  if manual then
    at = now
  else
    late = now - tonumber(ref) * 1000
  end

  if mode == 'miss' or (mode == 'expire' and now > tonumber(deadline)) then
    local r = close(rec, st, ring, j, ref, manual, at, retention, 'missed', reason, by, note, token)
    if r then
      return answer(rec, st, lf, r, token, ref, until_s, skip, ltok, luntil, lref, lholder)
    end
    return {'missed', late}
  end
  local live = mode == 'live' or mode == 'ahead'
  local limit = tonumber(early)
  local bounded = (live or mode == 'wait') and limit > 0
  -- A slot older than its records are kept (less the early limit) may have
  -- had a record that expired: the retention, or a shorter one that the
  -- job's records were written with lately (a retention raised since, a
  -- replica of another config), from the earliest a record of the slot can
  -- have been written: the early limit before it, and a minute more for a
  -- claimant whose max_skew is longer.
  local keep = 0
  local old = false
  if bounded and mode == 'wait' and not manual then
    keep = kept(j[9], retention, tonumber(ref) * 1000 - limit - mark_ahead)
    old = late > keep - limit
  end
  if mode == 'expire' or (bounded and -late > limit) or old then
    local r = peek(rec)
    if r and stands(r, over_missed) then
      return answer(rec, st, lf, r, token, ref, until_s, skip, ltok, luntil, lref, lholder)
    end
    if mode == 'expire' then
      return {'early', tonumber(deadline) - now + 1}
    end
    if old then
      return {'old', late, keep}
    end
    return {'early', -late}
  end
  if j[5] then
    local why = 'paused by ' .. j[5]
    if j[6] and j[6] ~= '' then
      why = why .. ': ' .. j[6]
    end
    local r = close(rec, st, ring, j, ref, manual, at, retention, 'paused', why, by, note, token)
    if r then
      return answer(rec, st, lf, r, token, ref, until_s, skip, ltok, luntil, lref, lholder)
    end
    return {'paused', why}
  end
  if live and now > tonumber(deadline) then
    local r = close(rec, st, ring, j, ref, manual, at, retention, 'missed', reason .. ': ' .. late .. 'ms after the slot, past the misfire grace', by, note, token)
    if r then
      return answer(rec, st, lf, r, token, ref, until_s, skip, ltok, luntil, lref, lholder)
    end
    return {'missed', late}
  end
  if skip and ltok and ltok ~= token and luntil > now then -- a run holds the job
    local r = peek(rec) -- the slot may be that run's, or another's that ran already
    if r and stands(r, over_missed) then
      return answer(rec, st, lf, r, token, ref, until_s, skip, ltok, luntil, lref, lholder)
    end
    if mode == 'wait' or mode == 'ahead' or (mode == 'live' and late < 0) then
      -- (a live claim before the slot's time on Redis's clock, from a
      -- replica whose clock runs ahead: at the slot's time that run may
      -- have ended)
      return {'busy', lholder, luntil - now, lref}
    end
    local why = 'overlap: the run of ' .. slot_name(lref) .. ' on ' .. lholder .. ' still holds the job'
    if turn then
      why = 'overlap: the job is held for the retry of ' .. slot_name(lref) .. ' (its owner lost its lease), by ' .. lholder
    end
    r = close(rec, st, ring, j, ref, manual, at, retention, 'skipped', why, by, note, token)
    if r then
      return answer(rec, st, lf, r, token, ref, until_s, skip, ltok, luntil, lref, lholder)
    end
    return {'skipped', lholder, lref, luntil - now}
  end

  local f = next_fence(j[2], now_us)
  local fs = now_us_s
  if f ~= now_us then
    fs = string.format('%.0f', f)
  end
  local started, started_s = now, now_s
  if mode == 'ahead' and late < 0 then -- the run waits for the slot's time
    started = now - late
    started_s = tostring(started)
  end
  local at_s = '0'
  if manual then
    at_s = now_s
  end
  local content = 'running ' .. fs .. ' 1 ' .. started_s .. ' 0 ' .. at_s .. ' ' .. tail
  local r, was
  if over_missed then
    local v
    r, v = peek(rec)
    if r and not stands(r, over_missed) then
      -- Missed: no run of the slot ever started. Its record becomes this
      -- run's (a protocol-1 hash is replaced too); the job's state already
      -- counts it in its last and ends. The run's record keeps, as its by
      -- and note (a scheduled slot's are empty: the tail ends "0:0:"), who
      -- recorded the slot missed and why.
      if type(v) == 'table' then
        local h = redis.call('HMGET', rec, 'owner', 'error')
        was = {h[1] or '', h[2] or ''}
      else
        local m = parse(v) or {owner = r.owner, err = ''}
        was = {m.owner, m.err}
      end
      if string.sub(content, -4) == '0:0:' then
        content = string.sub(content, 1, -5) .. lp(was[1]) .. lp(was[2])
      end
      redis.call('SET', rec, content, 'PX', retention)
      marked(st, j[9], retention, now)
      r = nil
    elseif not r then
      r = create(rec, content, retention)
    end
  else
    r = create(rec, content, retention)
  end
  if r then
    return answer(rec, st, lf, r, token, ref, until_s, skip, ltok, luntil, lref, lholder)
  end
  if not was then
    marked(st, j[9], retention, now)
  end
  local l = lease(token, ref, until_s)
  if not manual and tonumber(ref) > (tonumber(j[3]) or 0) then
    redis.call('HSET', st, lf, l, 'fence', fs, 'running', with(j[4], ref), 'last', ref)
  else
    redis.call('HSET', st, lf, l, 'fence', fs, 'running', with(j[4], ref))
  end
  if was then
    return {'won', f, 1, '', started, was[1], was[2]}
  end
  return {'won', f, 1, '', started}
end

local profiles, np = {}, tonumber(ARGV[2])
for p = 1, np do
  local a = 2 + 10 * (p - 1)
  -- [11]: a won lease's end, "<until_ms>", formatted once per profile
  profiles[p] = {ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[a + 6], ARGV[a + 7], ARGV[a + 8], ARGV[a + 9],
    ARGV[a + 10], tostring(now + tonumber(ARGV[a + 1]))}
end
local out, first = {}, 2 + 10 * np
for i = 1, #KEYS / 3 do
  local a = first + 5 * (i - 1)
  out[i] = claim(KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i], ARGV[a + 1], ARGV[a + 2], profiles[tonumber(ARGV[a + 3])], ARGV[a + 4], ARGV[a + 5])
end
return out
