-- slot_renew: keep a running slot's lease (and its record) alive.
--
-- KEYS[1]  the lease: a string "<token> <slot> <replica>"
-- KEYS[2]  the slot record
-- ARGV[1]  the run's token
-- ARGV[2]  the lease TTL, ms
-- ARGV[3]  the record's retention, ms (a run longer than it keeps its record)
--
-- Returns 1 when the lease holds the token and now has the full TTL again;
--         0 when it does not (expired, or taken over): nothing changes.
local v = redis.call('GET', KEYS[1])
if not v or string.sub(v, 1, #ARGV[1] + 1) ~= ARGV[1] .. ' ' then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
