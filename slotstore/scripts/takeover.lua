-- takeover: settle running slots whose owners may have lost their leases.
-- With on_owner_lost "retry", take a slot over as attempt+1, with a new token
-- and a new fence; otherwise (or past the attempt limit) record it abandoned,
-- with a new fence too, so that the record's fence is no longer the lost
-- owner's. The owner is judged by the lease its record names, whatever the
-- caller's own overlap setting (replicas may disagree mid-deploy). One call
-- settles any number of slots, each on its own, in order. record_lib.lua,
-- prepended, has the record's format and the job state's fields.
--
-- KEYS     3 per slot, slot i at KEYS[3*i-2 .. 3*i]:
--   +1  the slot record (a string; its lease word names the lease)
--   +2  the job's state (a hash): the leases, fence, running slots, count of ends
--   +3  the job's ended ring (a hash)
-- ARGV[1]  the replica ID
-- ARGV     then 7 per slot, slot i from ARGV[1+7*(i-1)+1]:
--   +1  the token for the new attempt
--   +2  the slot's ref: unix seconds, or a manual slot's "m:<id>"
--   +3  the lease TTL, ms
--   +4  the record's retention, ms
--   +5  "retry" or "abandon"
--   +6  the attempt limit (max_attempts)
--   +7  the new attempt's run ID (a UUIDv7)
--
-- Returns one reply per slot, in order, each one of
--   {"won", fence, attempt, lease, run_id, started, at, by, note}
--                                          this replica runs attempt+1; lease is "job" or
--                                          "slot"; the rest is the record's (started: ms).
--                                          A takeover sent again with its token (its reply
--                                          was lost) is won again, its lease's TTL restored
--   {"alive", pttl}                        the owner still holds its lease (ms left), or a
--                                          replica of protocol 1 is finishing the run
--   {"busy", holder, pttl, holder_slot}    "retry", or a takeover sent again: another run (of
--                                          holder_slot) holds the job's lease; try after pttl
--   {"abandoned", owner, attempt, fence, at}
--                                          recorded abandoned, with a new fence; at is a
--                                          manual slot's time (its record's, ms), else 0.
--                                          A takeover sent again with its token (its reply
--                                          was lost) is answered so again
--   {"closed", state, owner}               the slot is no longer running: nothing to do
--   {"gone"}                               the slot has no record
local replica = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])

-- unlist takes a settled slot out of the job's running list, and ends its
-- retry's turn (record_lib.lua) if it has one.
local function unlist(st, ref)
  local j = redis.call('HMGET', st, 'running', 'turn')
  if has(j[1], ref) then
    redis.call('HSET', st, 'running', without(j[1], ref))
  end
  local _, tref = lease_of(j[2])
  if tref == ref then
    redis.call('HDEL', st, 'turn')
  end
end

local function settle(rec, st, ring, token, ref, ttl, retention, policy, limit, run_id)
  local v = redis.pcall('GET', rec)
  if type(v) == 'table' then -- a protocol-1 record, which jobstates.lua left as it was
    local h = redis.call('HMGET', rec, 'state', 'owner', 'token', 'lease')
    local lf = 'lease'
    if h[4] == 'slot' then
      lf = 'lease:' .. ref
    end
    local ltok, _, luntil = lease_of(redis.call('HGET', st, lf))
    if h[1] == 'running' then -- a replica of protocol 1 finishes it (jobstates.lua)
      if ltok == h[3] and luntil > now then
        return {'alive', luntil - now}
      end
      return {'alive', 1000}
    end
    unlist(st, ref)
    if ltok and ltok == h[3] then -- the copy of its lease (jobstates.lua): it has ended
      if lf == 'lease' then
        redis.call('HSET', st, 'lease', '')
      else
        redis.call('HDEL', st, lf)
      end
    end
    return {'closed', h[1] or 'unknown', h[2] or ''}
  end
  if not v then
    unlist(st, ref)
    return {'gone'}
  end
  local r = parse(v)
  if not r then
    unlist(st, ref)
    return {'closed', 'unknown', ''}
  end
  if r.state ~= 'running' then
    unlist(st, ref)
    if r.state == 'abandoned' and r.token == token then -- our abandon, sent again (its reply was lost)
      return {'abandoned', r.owner, tonumber(r.attempt), tonumber(r.fence), tonumber(r.at) or 0}
    end
    return {'closed', r.state, r.owner}
  end
  local lf = 'lease'
  if r.lease == 'slot' then
    lf = 'lease:' .. ref
  end
  if r.token == token then -- a retried takeover of ours: its lease back, unless another run holds the job
    local ltok, lref, luntil, lholder = lease_of(redis.call('HGET', st, lf))
    if ltok and ltok ~= token and luntil > now then
      return {'busy', lholder, luntil - now, lref}
    end
    redis.call('HSET', st, lf, token .. ' ' .. ref .. ' ' .. (now + tonumber(ttl)) .. ' ' .. replica)
    return {'won', tonumber(r.fence), tonumber(r.attempt), r.lease, r.run_id, tonumber(r.started), tonumber(r.at), r.by, r.note}
  end
  local j = redis.call('HMGET', st, lf, 'fence', 'running', 'ends', 'turn', 'rets')
  local ltok, lref, luntil, lholder = lease_of(j[1])
  if ltok == r.token and luntil > now then
    return {'alive', luntil - now}
  end
  local attempt = tonumber(r.attempt) or 1
  if policy == 'retry' and attempt < tonumber(limit) then
    local skip = r.lease ~= 'slot'
    local ttok, tref, tuntil, tholder = turn_of(j[5], ref, now)
    if ltok and luntil > now then
      -- Another run holds the job. This slot takes the job's next turn
      -- (unless another retry has it): until this takeover comes back, once
      -- that run's lease would have run out, later slots do not take the
      -- job first, or a job whose runs follow each other would never let
      -- the retry in.
      if skip and not ttok then
        redis.call('HSET', st, 'turn', token .. ' ' .. ref .. ' ' .. (luntil + tonumber(ttl)) .. ' ' .. replica)
      end
      return {'busy', lholder, luntil - now, lref}
    end
    if skip and ttok then -- another retry's turn
      return {'busy', tholder, tuntil - now, tref}
    end
    local f = next_fence(j[2], now_us)
    local fs = string.format('%.0f', f)
    redis.call('SET', rec, record('running', fs, attempt + 1, now, 0, r.at, r.lease, token, run_id, ref, replica,
      'attempt ' .. attempt .. ' on ' .. r.owner .. ' lost its lease', '', r.by, r.note), 'PX', retention)
    marked(st, j[6], retention, now)
    redis.call('HSET', st, lf, token .. ' ' .. ref .. ' ' .. (now + tonumber(ttl)) .. ' ' .. replica, 'fence', fs)
    if j[5] and skip then -- this slot's turn, or one that lapsed
      redis.call('HDEL', st, 'turn')
    end
    return {'won', f, attempt + 1, r.lease, run_id, now, tonumber(r.at), r.by, r.note}
  end
  local f = next_fence(j[2], now_us)
  local fs = string.format('%.0f', f)
  local why = 'owner ' .. r.owner .. ' lost its lease during attempt ' .. attempt
  if policy == 'retry' then
    why = why .. ', the last of ' .. limit
  end
  -- The record keeps the dead run's ID and owner, and takes this
  -- takeover's token: a takeover sent again after its reply was lost knows
  -- the abandon as its own, and reports it (no finish of the dead run
  -- matches either way: the fence is new).
  redis.call('SET', rec, record('abandoned', fs, attempt, r.started, now, r.at, r.lease, token, r.run_id, ref, r.owner,
    why, r.result, r.by, r.note), 'PX', retention)
  marked(st, j[6], retention, now)
  local ef, ends = ended_at(j[4])
  redis.call('HSET', ring, ef, ref)
  -- The dead owner's lease goes too, lapsed as it is: were Redis's clock to
  -- step back behind its end, it would read as held again, and its
  -- owner's finish would write over this record.
  if r.lease ~= 'slot' and ltok == r.token then
    redis.call('HSET', st, 'fence', fs, 'running', without(j[3], ref), 'ends', ends, 'lease', '')
  else
    redis.call('HSET', st, 'fence', fs, 'running', without(j[3], ref), 'ends', ends)
  end
  local _, tref = lease_of(j[5])
  if tref == ref then -- its retry's turn, past the attempt limit
    redis.call('HDEL', st, 'turn')
  end
  if r.lease == 'slot' and ltok then -- its own lease, lapsed
    redis.call('HDEL', st, lf)
  end
  return {'abandoned', r.owner, attempt, f, tonumber(r.at) or 0}
end

local out = {}
for i = 1, #KEYS / 3 do
  local a = 1 + 7 * (i - 1)
  out[i] = settle(KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[a + 6], ARGV[a + 7])
end
return out
