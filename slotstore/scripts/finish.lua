-- finish: record how runs ended and free their leases. A record is kept
-- for the retention, never deleted, so a finished slot stays closed. One call
-- finishes any number of runs, each on its own, in order. record_lib.lua,
-- prepended, has the record's format and the job state's fields.
--
-- A run whose lease in the job's state still holds its token, unexpired,
-- owns its record: no takeover or abandon touches a slot whose owner holds
-- its lease. Only when it does not is the record read, to see whether the
-- run still owns it.
--
-- KEYS     3 per run, run i at KEYS[3*i-2 .. 3*i]:
--   +1  the slot record (a string)
--   +2  the job's state (a hash): the run's lease, its running slots, its count of ends
--   +3  the job's ended ring (a hash)
-- ARGV     8 per run, run i from ARGV[8*(i-1)+1]:
--   +1  the run's token
--   +2  the slot's ref (unix seconds, or "m:<id>")
--   +3  the lease the run holds: "job" (the job's), or "slot" (its own)
--   +4  the final record up to its finished time: "<state> <fence> <attempt> <started> "
--   +5  the final record after its finished time: " <at> <lease> ..." to the end
--   +6  the record's retention, ms
--   +7  the run's attempt
--   +8  the run's ID
--
-- Returns one reply per run, in order:
--   {1}         the record was this run's and now holds the final state (the
--               same finish sent again also answers {1}: the record begins
--               with its head, fence included)
--   {1, "lapsed"}
--               the record was this run's and now holds the final state, but
--               the lease did not prove it: Redis held it lapsed, or another
--               run held the job (a replica that held it still, on its own
--               clock, lost it unseen); the same finish sent again answers
--               this too (the job's state keeps its token)
--   {1, "gone"} the record now holds the final state, but the lease proved
--               a record that Redis had lost: data loss, the final state
--               written all the same (the run started); the same finish
--               sent again answers this too (the job's state keeps its token)
--   {0, state}  the record is no longer this run's, or no longer running
--               (taken over, or recorded abandoned by another replica; "gone"
--               when it has expired or Redis lost it): nothing changes
--   {0, state, "replaced"}
--               the record is another run's, and no takeover of this run
--               wrote it (record_lib.lua's replaced): Redis lost this run's
--               record, and a claim made the slot anew, whose run may have
--               started too; nothing changes
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_s = tostring(now) -- formatted once per call, not once per run

local function finish(rec, st, ring, token, ref, kind, head, tail, retention, attempt, run_id)
  local lf = 'lease'
  if kind == 'slot' then
    lf = 'lease:' .. ref
  end
  local j = redis.call('HMGET', st, lf, 'running', 'ends', 'turn')
  local ltok, _, luntil = lease_of(j[1])
  local lapsed = ltok ~= token or luntil <= now
  if lapsed then -- the lease proves nothing: the record decides
    local v = redis.pcall('GET', rec)
    if type(v) == 'table' then -- a protocol-1 record: not this run's
      return {0, redis.call('HGET', rec, 'state') or 'gone'}
    end
    if not v then
      return {0, 'gone'}
    end
    local state, rattempt, rtok, rrun_id = string.match(v, '^(%S+) %S+ (%S+) %S+ %S+ %S+ %S+ (%S+) (%S+) ')
    if rtok ~= token then
      if state and replaced(rattempt, rrun_id, attempt, run_id) then
        return {0, state, 'replaced'}
      end
      return {0, state or 'gone'}
    end
    if state ~= 'running' then
      -- This finish sent again after its reply was lost wrote head itself;
      -- a takeover's abandon has a fence of its own, so it never matches.
      if string.sub(v, 1, #head) == head then
        local said = redis.call('HMGET', st, 'gone', 'lapsed')
        if has(said[1] or '', token) then
          return {1, 'gone'} -- the first one wrote it anew: the loss is said again
        end
        if has(said[2] or '', token) then
          return {1, 'lapsed'} -- the first one found the lease lapsed: said again
        end
        return {1}
      end
      return {0, state}
    end
  end
  local lost
  if lapsed then -- the record was read: it is this run's
    redis.call('SET', rec, head .. now_s .. tail, 'PX', retention)
  elseif not redis.call('SET', rec, head .. now_s .. tail, 'PX', retention, 'XX') then
    -- The lease proves the record this run's, yet it is gone: Redis lost it
    -- alone (evicted: it has a TTL, the job's state none). The run did
    -- start, so its end is written all the same, and the loss said. (A
    -- record another claim wrote since, skipped, paused or missed, is
    -- written over unseen: a renewal sees it, a finish does not look, which
    -- would cost every finish a read.)
    redis.call('SET', rec, head .. now_s .. tail, 'PX', retention)
    redis.call('HSET', st, 'gone', newest(redis.call('HGET', st, 'gone'), token, 8)) -- for this finish sent again, its reply lost
    lost = {1, 'gone'}
  end
  local running = without(j[2], ref)
  local ef, ends = ended_at(j[3])
  redis.call('HSET', ring, ef, ref)
  if kind == 'slot' then
    redis.call('HSET', st, 'running', running, 'ends', ends)
    if ltok == token then
      redis.call('HDEL', st, lf)
    end
  elseif ltok == token then
    redis.call('HSET', st, 'lease', '', 'running', running, 'ends', ends)
  else
    redis.call('HSET', st, 'running', running, 'ends', ends)
  end
  if kind ~= 'slot' then
    -- The slot is settled: a retry's turn for it (record_lib.lua), taken
    -- meanwhile by a watcher's takeover, must not keep the job from later
    -- slots. A run whose lease lapsed (its replica paused past it) finishes
    -- after all; so does one whose claim or takeover, its reply lost, won
    -- its slot back after the turn was taken: its lease holds again.
    local _, tref = lease_of(j[4])
    if tref == ref then
      redis.call('HDEL', st, 'turn')
    end
  end
  if lapsed then
    -- The lease did not prove the record: Redis held it lapsed, or another
    -- run's. If the run's replica still held it on its own clock, Redis
    -- lost it unseen (a failover that lost renewals, its clock stepped):
    -- the replica reports the loss. The job's state keeps the token, for
    -- this finish sent again, its reply lost.
    redis.call('HSET', st, 'lapsed', newest(redis.call('HGET', st, 'lapsed'), token, 8))
    return {1, 'lapsed'}
  end
  return lost or {1}
end

local out = {}
for i = 1, #KEYS / 3 do
  local a = 8 * (i - 1)
  out[i] = finish(KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5],
    ARGV[a + 6], ARGV[a + 7], ARGV[a + 8])
end
return out
