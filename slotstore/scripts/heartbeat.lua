-- heartbeat: publish a replica in the deployment's registry and read every
-- live replica back. A field per replica holds "<instance> <seen_ms> <json>";
-- only the first two words are read here. Another live instance (seen within
-- the stale window) under the same ID is a duplicate: nothing is written.
-- Entries not seen for ten stale windows are removed. A stale entry that
-- publishes a catch-up (its JSON has "catchup_ms") is read back too: its
-- replica stopped heartbeating mid catch-up without leaving, and a live
-- peer records what it had not reached. (Under the field "<id> <instance>"
-- when a successor under its ID replaced it.) Such an entry is kept
-- longer, ARGV[5] (15 minutes): a replica killed alone (a lost host, a crash
-- loop's backoff) may start again minutes later, and only it reads it.
--
-- The description is small: a replica's job list (its jobs' settings) is in
-- a hash of its own, which the caller writes and reads with plain commands
-- (it is in another Cluster slot), once per table and only when tables
-- differ. So a heartbeat costs the same with 10 jobs as with 10,000.
--
-- KEYS[1]  the registry: a hash, field = replica ID
-- ARGV[1]  the replica ID
-- ARGV[2]  its instance (random per process start)
-- ARGV[3]  its description, JSON
-- ARGV[4]  the stale window, ms: an entry older than this is not live
-- ARGV[5]  how long an entry that publishes a catch-up is kept, ms (at
--          least ten stale windows; absent, from an older version: ten)
--
-- Returns {"ok", now_ms, n, id_1 .. id_n, m, field, value, ...}   the n IDs whose
--                                                                 entries it removed,
--                                                                 then every live entry
--                                                                 (m fields and values),
--                                                                 then each stale one
--                                                                 with a catch-up
--         {"duplicate", now_ms, value}                         the live entry under this ID
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local stale = tonumber(ARGV[4])
local keep = math.max(10 * stale, tonumber(ARGV[5]) or 0)
local pruned, live, gone = {}, {}, {}
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur then
  local inst, seen = string.match(cur, '^(%S+) (%d+) ')
  if inst ~= ARGV[2] and seen and now - tonumber(seen) < stale then
    return {'duplicate', now, cur}
  end
  -- A stale predecessor under this ID (killed, and started again) that was
  -- catching up: its entry moves to the field "<id> <instance>" (an ID has
  -- no space), so that every replica reads it as gone, below and at each
  -- heartbeat until it is removed, as if this one had not replaced it: a
  -- lost reply loses nothing.
  if inst ~= ARGV[2] and now - (tonumber(seen) or 0) <= keep and string.find(cur, '"catchup_ms"', 1, true) then
    redis.call('HSET', KEYS[1], ARGV[1] .. ' ' .. inst, cur)
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. now .. ' ' .. ARGV[3])
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local _, seen = string.match(all[i + 1], '^(%S+) (%d+) ')
  local age = now - (tonumber(seen) or 0)
  local catchup = string.find(all[i + 1], '"catchup_ms"', 1, true)
  if age > (catchup and keep or 10 * stale) then
    redis.call('HDEL', KEYS[1], all[i])
    pruned[#pruned + 1] = all[i]
  elseif age < stale then
    live[#live + 1] = all[i]
    live[#live + 1] = all[i + 1]
  elseif catchup then
    gone[#gone + 1] = all[i]
    gone[#gone + 1] = all[i + 1]
  end
end
local out = {'ok', now, #pruned}
for _, id in ipairs(pruned) do
  out[#out + 1] = id
end
out[#out + 1] = #live
for _, v in ipairs(live) do
  out[#out + 1] = v
end
for _, v in ipairs(gone) do
  out[#out + 1] = v
end
return out
