-- renew: keep a running slot's lease (and its record) alive, if the run still
-- owns the slot. The record is checked first: a slot taken over (another
-- attempt's token) or abandoned is no longer the run's, whatever the job's
-- state says, so its owner learns on its next renewal. record_lib.lua,
-- prepended, has the job state's lease.
--
-- KEYS[1]  the job's state (a hash): the lease field
-- KEYS[2]  the slot record (a string)
-- ARGV[1]  the run's token
-- ARGV[2]  the slot's ref (unix seconds, or "m:<id>")
-- ARGV[3]  the lease the run holds: "job" (the job's) or "slot" (its own)
-- ARGV[4]  the lease TTL, ms
-- ARGV[5]  the record's retention, ms (a run longer than it keeps its record)
-- ARGV[6]  the replica ID
-- ARGV[7]  the run's attempt
-- ARGV[8]  the run's ID
--
-- Returns  1  renewed: the record and the lease are the run's; the lease has
--             its full TTL again
--          0  the lease no longer holds the token (expired, or another run's)
--         -1  the record is no longer the run's: taken over, or abandoned
--         -2  the record or the job's state is gone, or the record is
--             another run's that no takeover of this one wrote
--             (record_lib.lua's replaced): Redis lost data (a restart
--             without persistence, a failover, an eviction); a state that
--             has had a claim always holds its fence
-- Nothing changes unless it returns 1.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local v = redis.pcall('GET', KEYS[2])
if type(v) == 'table' then -- a protocol-1 record: not this run's
  return -1
end
if not v then
  return -2
end
local state, rattempt, rtok, rrun_id = string.match(v, '^(%S+) %S+ (%S+) %S+ %S+ %S+ %S+ (%S+) (%S+) ')
if state and rtok ~= ARGV[1] and replaced(rattempt, rrun_id, ARGV[7], ARGV[8]) then
  return -2
end
if rtok ~= ARGV[1] or state ~= 'running' then
  return -1
end
local lf = 'lease'
if ARGV[3] == 'slot' then
  lf = 'lease:' .. ARGV[2]
end
local j = redis.call('HMGET', KEYS[1], lf, 'fence')
if not j[2] then
  return -2
end
local ltok, _, luntil = lease_of(j[1])
if ltok ~= ARGV[1] or luntil <= now then
  return 0
end
redis.call('HSET', KEYS[1], lf, ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. (now + tonumber(ARGV[4])) .. ' ' .. ARGV[6])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return 1
