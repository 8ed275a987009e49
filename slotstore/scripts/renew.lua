-- renew: keep a running slot's lease (and its record) alive, if the run still
-- owns the slot. The record is checked first: a slot taken over (another
-- attempt's token) or abandoned is no longer the run's, whatever its lease
-- key says, so its owner learns on its next renewal.
--
-- KEYS[1]  the lease: a string "<token> <slot> <replica>"
-- KEYS[2]  the slot record
-- ARGV[1]  the run's token
-- ARGV[2]  the lease TTL, ms
-- ARGV[3]  the record's retention, ms (a run longer than it keeps its record)
--
-- Returns  1  renewed: the record and the lease are the run's; the lease has
--             its full TTL again
--          0  the lease no longer holds the token (expired, or another run's)
--         -1  the record is no longer the run's: taken over, or abandoned
--         -2  the record is gone: Redis lost data (a restart without
--             persistence, or a failover)
-- Nothing changes unless it returns 1.
local r = redis.call('HMGET', KEYS[2], 'token', 'state')
if not r[2] then
  return -2
end
if r[1] ~= ARGV[1] or r[2] ~= 'running' then
  return -1
end
local v = redis.call('GET', KEYS[1])
if not v or string.sub(v, 1, #ARGV[1] + 1) ~= ARGV[1] .. ' ' then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
