-- probe: read Redis's clock and the deployment's epoch, creating the epoch if
-- it is missing. The epoch is a random value written once; when Redis loses
-- its data (a restart without persistence, a failover to an empty replica)
-- it is gone, and the next probe writes another, which every replica that
-- knew the old one reports as data loss.
--
-- KEYS[1]  the epoch key (a string, no TTL)
-- ARGV[1]  the epoch to write if there is none
--
-- Returns {seconds, microseconds, epoch, created}: TIME, the epoch, and 1 when
-- this call created it
local t = redis.call('TIME')
local epoch, created = redis.call('GET', KEYS[1]), 0
if not epoch then
  epoch, created = ARGV[1], 1
  redis.call('SET', KEYS[1], epoch)
end
return {t[1], t[2], epoch, created}
