-- leave: remove a stopping replica from the deployment's registry, so its
-- peers stop counting it (spread routing prefers only live replicas) at
-- their next heartbeat rather than after the stale window. Only this
-- process's entry is removed: a successor under the same ID keeps its own.
--
-- KEYS[1]  the registry: a hash, field = replica ID, value "<instance> <seen_ms> <json>"
-- ARGV[1]  the replica ID
-- ARGV[2]  its instance
--
-- Returns 1 removed; 0 the entry is another instance's; -1 there is none
--         (this call sent again after its reply was lost, or the entry was
--         pruned)
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then
  return -1
end
if string.match(cur, '^(%S+) ') == ARGV[2] then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return 1
end
return 0
