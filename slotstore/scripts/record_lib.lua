-- record_lib: what the slot scripts share (prepended to claim, finish,
-- renew, takeover and jobstates): the slot record's format, the job state's
-- lease and lists, and the fencing token. Not a script of its own.
--
-- KEYS     none of its own
-- Returns  its functions return values to the script they are part of
--
-- A slot's record is one string (record.go has the same format in Go):
--   <state> <fence> <attempt> <started> <finished> <at> <lease> <token> <run_id> <ref> <owner><error><result><by><note>
-- ten words, each followed by a space ("-" for none; times in ms on Redis's
-- clock, 0 for none), then five texts, each "<length>:<bytes>".
--
-- A job's state is one hash, <prefix>:{<job>}:state:
--   lease        the job's lease (overlap skip): "<token> <ref> <until_ms> <replica>",
--                "" when free; it holds while until_ms is ahead of Redis's clock
--   lease:<ref>  a slot's own lease (overlap allow), same shape; gone when free
--   fence        the job's last fencing token
--   last         the latest scheduled slot (unix s) that has a record
--   running      the refs of the slots whose records are running, space-separated
--   ends         how many of its slots have ended (a record closed)
-- and the 32 slots that ended last are a ring beside it, <prefix>:{<job>}:ended:
-- a hash whose field n (0..31) is the ref of the slot that ended when ends
-- was n, modulo 32. A ring of its own keeps the state small (Redis keeps a
-- small hash as a list, where every field read is a scan), and recording an
-- end reads nothing of it.
--   paused_by, paused_note, paused_at   the job's pause, while it stands
--   turn         a retry's turn (overlap skip), the lease's shape: "<token> <ref>
--                <until_ms> <replica>". A takeover under on_owner_lost retry of
--                slot <ref> (takeover.lua) found another run holding the job; until
--                until_ms the job is held for that retry whenever its lease is
--                free, so that later slots do not take the job first each time it
--                frees (claim.lua answers them as if a run held it). Gone once
--                the slot is settled (taken over, abandoned, or finished by its
--                run: an owner that was only slow, or a claim or takeover that won
--                the slot back when sent again after its reply was lost); it
--                lapses if no takeover comes back.
--   v            "2" once the job's protocol-1 keys were read in (jobstates.lua)
--   gone         the tokens of the last 8 runs whose finish found its record lost
--                and wrote it anew (finish.lua), newest first, space-separated, so
--                that each of those finishes sent again says so too
--   lapsed       the tokens of the last 8 runs whose finish found their lease lapsed,
--                or another run's, and wrote their end (finish.lua), newest first,
--                space-separated, so that each of those finishes sent again says so too
--   rets         the retentions its records were written with lately: "<retention_ms>:<until_ms>"
--                pairs, space-separated, one per retention; no record of a slot was
--                first written with that retention after until_ms (marked)

-- lp is one text field of a record.
local function lp(s)
  return #s .. ':' .. s
end

-- record builds a record string. fence is a string (fences need all 16
-- digits); the times are numbers of ms, or 0.
local function record(state, fence, attempt, started, finished, at, lease, token, run_id, ref, owner, err, result, by, note)
  return state .. ' ' .. fence .. ' ' .. attempt .. ' ' .. started .. ' ' .. finished .. ' ' .. at .. ' ' ..
    lease .. ' ' .. token .. ' ' .. run_id .. ' ' .. ref .. ' ' .. lp(owner) .. lp(err) .. lp(result) .. lp(by) .. lp(note)
end

-- parse reads a record string into a table of its fields; nil when it is
-- not one.
local function parse(v)
  local state, fence, attempt, started, finished, at, lease, token, run_id, ref, rest =
    string.match(v, '^(%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (.*)$')
  if not state then
    return nil
  end
  local texts, pos = {}, 1
  for i = 1, 5 do
    local n, at_text = string.match(rest, '^(%d+):()', pos)
    if not n then
      return nil
    end
    texts[i] = string.sub(rest, at_text, at_text + tonumber(n) - 1)
    pos = at_text + tonumber(n)
  end
  return {state = state, fence = fence, attempt = attempt, started = started, finished = finished, at = at,
    lease = lease, token = token, run_id = run_id, ref = ref,
    owner = texts[1], err = texts[2], result = texts[3], by = texts[4], note = texts[5]}
end

-- head reads what a claim needs of a record that stands in its way: the
-- words and the owner, in one match (cheaper than parse); nil when v is not
-- a record.
local function head(v)
  local state, fence, attempt, started, token, run_id, n, p =
    string.match(v, '^(%S+) (%S+) (%S+) (%S+) %S+ %S+ %S+ (%S+) (%S+) %S+ (%d+):()')
  if not state then
    return nil
  end
  return {state = state, fence = fence, attempt = attempt, started = started, token = token, run_id = run_id,
    owner = string.sub(v, p, p + tonumber(n) - 1)}
end

-- replaced reports whether a slot's record that is not a run's (another
-- token) took the place of the run's record after Redis lost it (a restart
-- without persistence, a failover), rather than being written over it by a
-- takeover of the run: a takeover records the run's attempt abandoned,
-- keeping its run ID, or runs a later attempt. Nothing else writes over a
-- running record. r_attempt and r_run_id are the record's, attempt and
-- run_id the run's.
local function replaced(r_attempt, r_run_id, attempt, run_id)
  return r_run_id ~= run_id and (tonumber(r_attempt) or 0) <= (tonumber(attempt) or 0)
end

-- lease_of reads a lease value: its token, ref, until (a number) and holder;
-- nil when the value is free (nil or "").
local function lease_of(v)
  if not v or v == '' then
    return nil
  end
  local token, ref, till, holder = string.match(v, '^(%S+) (%S+) (%d+) (.*)$')
  if not token then
    return nil
  end
  return token, ref, tonumber(till), holder
end

-- turn_of reads the job's turn (the field's value v) for a claim or takeover
-- of ref: a retry of another slot whose turn stands at now, as lease_of
-- reads a lease; nil when there is none, or it is ref's own.
local function turn_of(v, ref, now)
  local token, tref, till, holder = lease_of(v)
  if token and tref ~= ref and till > now then
    return token, tref, till, holder
  end
  return nil
end

-- with returns a space-separated list with ref at its end.
local function with(list, ref)
  if not list or list == '' then
    return ref
  end
  return list .. ' ' .. ref
end

-- has reports whether a space-separated list holds ref.
local function has(list, ref)
  return list ~= nil and string.find(' ' .. list .. ' ', ' ' .. ref .. ' ', 1, true) ~= nil
end

-- newest returns a space-separated list of at most n refs: ref, then the
-- first n-1 of list.
local function newest(list, ref, n)
  local out = {ref}
  if list then
    for r in string.gmatch(list, '%S+') do
      if #out >= n then
        break
      end
      out[#out + 1] = r
    end
  end
  return table.concat(out, ' ')
end

-- without returns a space-separated list without ref.
local function without(list, ref)
  if not list or list == '' or list == ref then
    return ''
  end
  local s, e = string.find(' ' .. list .. ' ', ' ' .. ref .. ' ', 1, true)
  if not s then
    return list
  end
  -- ref is list's bytes s..e-2; the space before it is s-1, after it e-1
  local before, after = '', string.sub(list, e)
  if s > 1 then -- (string.sub(list, 1, -1) would be all of it)
    before = string.sub(list, 1, s - 2)
  end
  if before ~= '' and after ~= '' then
    return before .. ' ' .. after
  end
  return before .. after
end

-- ended_ring is how many ended slots the job's state keeps.
local ended_ring = 32

-- ended_at returns the field of the ended ring where the next end goes, for
-- a job whose state says ends (its count of ends, or nil), and the new count.
local function ended_at(ends)
  local n = tonumber(ends) or 0
  return n % ended_ring, n + 1
end

-- next_fence returns the job's next fencing token: one more than its last,
-- and at least Redis's clock in microseconds, so that fences keep growing
-- when the job's state is lost (a restart without persistence, or a failover
-- to a replica that had not received it), provided the Redis hosts' clocks
-- are in step. Fences stay below 2^53, exact in Lua's numbers, until 2255.
local function next_fence(last, now_us)
  local l = tonumber(last) or 0
  if l + 1 <= now_us then
    return now_us
  end
  return l + 1
end

-- mark_ahead is how far past Redis's clock a retention's mark reaches when
-- it is written: a claim writes the job's state at most once in this time
-- to keep its retention's mark ahead of the clock.
local mark_ahead = 60000

-- marked makes the job's retention marks (v: the field's value, or nil)
-- cover a record written now with retention (ms, a string or a number), so
-- that a backfill learns when a slot's record may have been kept for less
-- than its own retention says (kept): a retention raised since, or a
-- replica of another config. A mark no slot a checker may claim can fall
-- behind is dropped: one whose until is further back than the longest
-- retention marked (every slot that old is refused by every mark left). At
-- most 8 are kept: past that, the two shortest become one, with the
-- shorter retention and the later until (stricter than both). It writes
-- nothing when the mark stands ahead of now.
local function marked(st, v, retention, now)
  local r = tonumber(retention)
  if v then -- most often: one retention, marked ahead of now
    local mr, mu = string.match(v, '^(%d+):(%d+)$')
    if mr and tonumber(mr) == r and tonumber(mu) >= now then
      return
    end
  end
  local ms, longest = {}, r
  if v then
    for mr, mu in string.gmatch(v, '(%d+):(%d+)') do
      mr, mu = tonumber(mr), tonumber(mu)
      ms[#ms + 1] = {mr, mu}
      if mr > longest then
        longest = mr
      end
    end
  end
  local keep, own, changed = {}, false, false
  for _, m in ipairs(ms) do
    if m[1] == r then
      own = true
      if m[2] < now then
        m[2], changed = now + mark_ahead, true
      end
      keep[#keep + 1] = m
    elseif now - m[2] > longest then
      changed = true
    else
      keep[#keep + 1] = m
    end
  end
  if not own then
    keep[#keep + 1], changed = {r, now + mark_ahead}, true
  end
  if not changed then
    return
  end
  table.sort(keep, function(a, b) return a[1] < b[1] end)
  while #keep > 8 do
    keep[2] = {keep[1][1], math.max(keep[1][2], keep[2][2])}
    table.remove(keep, 1)
  end
  local out = {}
  for i, m in ipairs(keep) do
    out[i] = string.format('%.0f:%.0f', m[1], m[2])
  end
  redis.call('HSET', st, 'rets', table.concat(out, ' '))
end

-- kept is how long a record of a slot may have been kept: retention (ms),
-- or less when the job's retention marks (v) hold a shorter one that
-- records were written with at or after from (ms: the earliest a record of
-- the slot can have been written; a mark reaches mark_ahead past its last
-- write, so from need not allow for that).
local function kept(v, retention, from)
  local k = tonumber(retention)
  if v then
    for mr, mu in string.gmatch(v, '(%d+):(%d+)') do
      mr = tonumber(mr)
      if mr < k and tonumber(mu) >= from then
        k = mr
      end
    end
  end
  return k
end

-- slot_name names a slot's ref for the people who read its records: "slot
-- 2026-11-25T12:00:00Z" (UTC) for a scheduled slot's unix seconds, "manual
-- slot <id>" for a manual one's "m:<id>".
local function slot_name(ref)
  if string.sub(ref, 1, 2) == 'm:' then
    return 'manual slot ' .. string.sub(ref, 3)
  end
  local s = tonumber(ref)
  if not s then
    return 'slot ' .. ref
  end
  -- The civil date of a day count (Howard Hinnant's days_from_civil, run
  -- backwards): eras of 400 years, years from March, so February ends one.
  local days = math.floor(s / 86400)
  local secs = s - days * 86400
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m, y = mp + 3, yoe + era * 400
  if m > 12 then
    m, y = m - 12, y + 1
  end
  return string.format('slot %04d-%02d-%02dT%02d:%02d:%02dZ', y, m, d,
    math.floor(secs / 3600), math.floor(secs % 3600 / 60), secs % 60)
end
