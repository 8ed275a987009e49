-- rw_lib: helpers prepended to every rw_*.lua script; not run on its own.
--
-- KEYS[1]  (of the script it is prepended to) the read-write lock: one hash
--          whose fields are its holders, each valued with its expiry in ms on
--          Redis's own clock (TIME), never a client's:
--            "w:<token>"  the writer
--            "r:<token>"  a reader
--            "q:<token>"  a writer waiting for the readers to leave; while one
--                         waits, new readers are refused (no writer starvation)
-- ARGV     as the script says.
-- Returns  nothing itself; the helpers below return state to the script.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- load prunes expired fields and returns the live state: reader count, the
-- writer's field (or nil), waiter count, the latest expiry of any field, and
-- the soonest expiry of a holder (reader or writer; nil when there is none).
local function load(key, now)
  local s = {readers = 0, writer = nil, waiters = 0, latest = 0, soonest = nil}
  local all = redis.call('HGETALL', key)
  for i = 1, #all, 2 do
    local field, exp = all[i], tonumber(all[i + 1])
    if exp <= now then
      redis.call('HDEL', key, field)
    else
      local kind = string.sub(field, 1, 1)
      if kind == 'r' then
        s.readers = s.readers + 1
      elseif kind == 'w' then
        s.writer = field
      else
        s.waiters = s.waiters + 1
      end
      if kind ~= 'q' and (s.soonest == nil or exp < s.soonest) then
        s.soonest = exp
      end
      if exp > s.latest then
        s.latest = exp
      end
    end
  end
  return s
end

-- rearm keeps the hash alive exactly as long as its latest field.
local function rearm(key, latest, now)
  if latest > now then
    redis.call('PEXPIRE', key, latest - now)
  end
end

-- wait_hint is how long a refused caller may wait before trying again: until
-- the soonest holder expires (-1 when only waiters block it).
local function wait_hint(s, now)
  if s.soonest == nil then
    return -1
  end
  return s.soonest - now
end

-- field_exp returns a live field's expiry, or nil (pruning it if expired).
local function field_exp(key, field, now)
  local exp = tonumber(redis.call('HGET', key, field))
  if exp == nil then
    return nil
  end
  if exp <= now then
    redis.call('HDEL', key, field)
    return nil
  end
  return exp
end
