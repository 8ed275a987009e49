-- heartbeat: publish a replica in the deployment's registry and read every
-- live replica back. A field per replica holds "<instance> <seen_ms> <json>";
-- only the first two words are read here. Another live instance (seen within
-- the stale window) under the same ID is a duplicate: nothing is written.
-- Entries not seen for ten stale windows are removed, with their job lists.
--
-- The description is small: a replica's job list (its jobs' settings) is in
-- a hash of its own (+2), written when the replica sends it (at its first
-- heartbeat, when its table changes, and when the list is gone) and read
-- only by a replica whose table differs. So a heartbeat costs the same with
-- 10 jobs as with 10,000.
--
-- KEYS[1]  the registry: a hash, field = replica ID
-- KEYS[2]  the job lists: a hash, field = replica ID, value "<table hash> <json>"
-- ARGV[1]  the replica ID
-- ARGV[2]  its instance (random per process start)
-- ARGV[3]  its description, JSON
-- ARGV[4]  the stale window, ms: an entry older than this is not live
-- ARGV[5]  its job list, "<table hash> <json>", or "" to leave it as it is
--
-- Returns {"ok", now_ms, listed, field, value, ...}   every live entry; listed
--                                                      is 1 when this replica's
--                                                      job list is in KEYS[2]
--         {"duplicate", now_ms, value}                 the live entry under this ID
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local stale = tonumber(ARGV[4])
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur then
  local inst, seen = string.match(cur, '^(%S+) (%d+) ')
  if inst ~= ARGV[2] and seen and now - tonumber(seen) < stale then
    return {'duplicate', now, cur}
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. now .. ' ' .. ARGV[3])
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[5])
end
local out = {'ok', now, redis.call('HEXISTS', KEYS[2], ARGV[1])}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local _, seen = string.match(all[i + 1], '^(%S+) (%d+) ')
  local age = now - (tonumber(seen) or 0)
  if age > 10 * stale then
    redis.call('HDEL', KEYS[1], all[i])
    redis.call('HDEL', KEYS[2], all[i])
  elseif age < stale then
    out[#out + 1] = all[i]
    out[#out + 1] = all[i + 1]
  end
end
return out
