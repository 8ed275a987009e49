-- jobstates: read each job's latest recorded slot and running slots, after
-- taking in what replicas of protocol 1 left under the job's older keys (its
-- fence counter, high-water mark, running set, leases, pause and history).
-- A running protocol-1 record whose lease still holds its token is a run
-- that goes on: the replica of protocol 1 that holds it has left the
-- registry and is finishing its runs, and it renews and records them as
-- protocol 1 does. It is listed running, its lease is copied into the job's
-- state (so that overlap still holds), and the record is left as it is:
-- read in again, within a lease TTL, until it ends. A running record whose
-- lease is gone becomes a protocol-2 one, with its remaining TTL, for a
-- takeover to settle; finished ones stay as they are (every script reads
-- them as records). Taking in twice changes nothing more. record_lib.lua,
-- prepended, has the record's format and the job state's fields.
--
-- KEYS     per job: 8 + 2*n, where n is ARGV's count for it:
--   +1  the job's state (a hash)
--   +2  protocol 1's job lease: a string "<token> <slot> <replica>"
--   +3  protocol 1's fence counter (a string)
--   +4  protocol 1's high-water mark (a sorted set: member "last")
--   +5  protocol 1's running slots (a sorted set of refs)
--   +6  protocol 1's pause (a hash: note, by, at)
--   +7  protocol 1's run history (a stream: field "slot")
--   +8  the job's ended ring (a hash), seeded from that history
--   then 2 per running ref of +5 (as the caller read it): its record, its
--   slot's own lease (protocol 1's "<prefix>:{<job>}:lease:<ref>")
-- ARGV     per job: n, then the n refs (unix seconds, or "m:<id>")
--
-- Returns one reply per job, in order: {last, running, converted, going}:
-- the latest scheduled slot with a record (unix s, 0 for none), the refs of
-- its running slots (space-separated), how many protocol-1 records it
-- converted, and how many protocol-1 runs go on
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function read_in(k, a)
  local st = KEYS[k + 1]
  local j = redis.call('HMGET', st, 'fence', 'last', 'running', 'ends', 'paused_by', 'v', 'lease')
  local fields = {'v', '2'}
  local fence = tonumber(j[1]) or 0
  local f1 = tonumber(redis.call('GET', KEYS[k + 3]) or '0') or 0
  if f1 > fence then
    fields[#fields + 1], fields[#fields + 2] = 'fence', string.format('%.0f', f1)
  end
  local last = tonumber(j[2]) or 0
  local l1 = tonumber(redis.call('ZSCORE', KEYS[k + 4], 'last') or '0') or 0
  if l1 > last then
    last = l1
    fields[#fields + 1], fields[#fields + 2] = 'last', string.format('%.0f', l1)
  end
  local running, converted = j[3] or '', 0
  local n = tonumber(ARGV[a + 1])
  local going = 0
  for i = 1, n do
    local ref, rec, slotlease = ARGV[a + 1 + i], KEYS[k + 8 + 2 * i - 1], KEYS[k + 8 + 2 * i]
    local settled = true -- protocol 1's running set no longer needs the ref
    if redis.call('TYPE', rec).ok == 'hash' then
      local h = {}
      local all = redis.call('HGETALL', rec)
      for x = 1, #all, 2 do
        h[all[x]] = all[x + 1]
      end
      if h.state == 'running' then
        local kind = h.lease or 'job'
        local lk, lf = KEYS[k + 2], 'lease'
        if kind == 'slot' then
          lk, lf = slotlease, 'lease:' .. ref
        end
        local lv, lttl = redis.call('GET', lk), redis.call('PTTL', lk)
        local ltok, lref, holder
        if lv then
          ltok, lref, holder = string.match(lv, '^(%S+) (%S+) (.*)$')
        end
        local cur = j[7]
        if kind == 'slot' then
          cur = redis.call('HGET', st, lf)
        end
        local ct, _, cu = lease_of(cur)
        local free = not ct or ct == ltok or cu <= now
        if lv and lttl > 0 and ltok == h.token then
          -- Its run goes on: a replica of protocol 1 that has left the
          -- registry is finishing it, renewing and recording it as protocol
          -- 1 does, so the record stays as it is. The job's state holds its
          -- lease, which the caller refreshes by reading in again.
          if free then
            fields[#fields + 1], fields[#fields + 2] = lf, ltok .. ' ' .. ref .. ' ' .. (now + lttl) .. ' ' .. holder
          end
          going = going + 1
          settled = false
        else
          local at = 0
          if h.kind == 'manual' then
            at = tonumber(h.at) or 0
          end
          local ttl = redis.call('PTTL', rec)
          if ttl <= 0 then
            ttl = 86400000
          end
          redis.call('SET', rec, record('running', h.fence or '0', h.attempt or '1', h.started or '0', 0, at, kind,
            h.token or '-', h.run_id or '-', ref, h.owner or '', h.error or '', h.result or '', h.by or '', h.note or ''), 'PX', ttl)
          converted = converted + 1
        end
        if not has(running, ref) then
          running = with(running, ref)
        end
      end
    end
    if settled then
      redis.call('ZREM', KEYS[k + 5], ref)
    end
  end
  if running ~= (j[3] or '') then
    fields[#fields + 1], fields[#fields + 2] = 'running', running
  end
  if not j[5] then
    local p = redis.call('HMGET', KEYS[k + 6], 'note', 'by', 'at')
    if p[2] then
      fields[#fields + 1], fields[#fields + 2] = 'paused_by', p[2]
      fields[#fields + 1], fields[#fields + 2] = 'paused_note', p[1] or ''
      fields[#fields + 1], fields[#fields + 2] = 'paused_at', p[3] or '0'
    end
  end
  if not j[4] then -- the ended ring, from the history: oldest first, so that the newest is last
    local refs, seen = {}, {}
    for _, e in ipairs(redis.call('XREVRANGE', KEYS[k + 7], '+', '-', 'COUNT', 200)) do
      local f = e[2]
      for x = 1, #f, 2 do
        if f[x] == 'slot' and not seen[f[x + 1]] and not has(running, f[x + 1]) and #refs < ended_ring then
          seen[f[x + 1]] = true
          refs[#refs + 1] = f[x + 1]
        end
      end
    end
    for i = #refs, 1, -1 do
      local ef, ends = ended_at(#refs - i)
      redis.call('HSET', KEYS[k + 8], ef, refs[i])
      if i == 1 then
        fields[#fields + 1], fields[#fields + 2] = 'ends', ends
      end
    end
  end
  if j[6] ~= '2' or #fields > 2 then
    redis.call('HSET', st, unpack(fields))
  end
  return {last, running, converted, going}
end

local out, k, a = {}, 0, 0
while k < #KEYS do
  local n = tonumber(ARGV[a + 1])
  out[#out + 1] = read_in(k, a)
  k, a = k + 8 + 2 * n, a + 1 + n
end
return out
