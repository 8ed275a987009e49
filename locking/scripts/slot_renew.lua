-- slot_renew: keep a running slot's lease (and its record) alive.
--
-- KEYS[1]  the lease hash
-- KEYS[2]  the slot record
-- ARGV[1]  the run's token
-- ARGV[2]  the lease TTL, ms
-- ARGV[3]  the record's retention, ms (a run longer than it keeps its record)
--
-- Returns 1 when the lease holds the token and now has the full TTL again;
--         0 when it does not (expired, or taken over): nothing changes.
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
