-- outbox: the alert outbox, one delivery (an event for one webhook) per
-- hash. A delivery is added once (its ID is the event's and the webhook's:
-- the replicas that report the same fact add one), taken by one sender at a
-- time, and marked delivered or failed for good: a restarted replica never
-- sends a delivered one again.
--
-- KEYS[1]  the delivery: a hash (payload, url, state, attempts, owner, until,
--          error), kept for ARGV[5] ms; state is "pending", "delivered" or
--          "failed"
-- KEYS[2]  the pending deliveries: a sorted set, scored by when each is due
--          (unix ms), of their IDs
-- ARGV[1]  the operation: "add", "take" or "done"
-- ARGV[2]  the delivery's ID (its member in KEYS[2])
-- ARGV[3]  the caller: the sender that adds, takes or settles it
-- ARGV[4]  add: the payload; take: how long the take holds it, ms; done:
--          "delivered", "retry" or "failed"
-- ARGV[5]  add: how long the delivery is kept, ms; done "retry": the wait
--          before the next attempt, ms
-- ARGV[6]  add: the webhook's URL; done: the error ("" for none)
-- ARGV[7]  add: how long only the caller may take it, ms (0: anyone, now);
--          done "retry": how long past the next attempt's time only the
--          caller may take it (another takes over if it is gone)
--
-- Returns
--   add:  1 added; 0 it exists already (added by another replica, or before)
--   take: {payload, url, attempts} the caller holds it for ARGV[4] ms; or
--         false: delivered, failed, gone, or held by another sender
--   done: 1 settled; 0 the caller no longer holds it (another sender took it)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local op, id, me = ARGV[1], ARGV[2], ARGV[3]

if op == 'add' then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return 0
  end
  redis.call('HSET', KEYS[1], 'payload', ARGV[4], 'url', ARGV[6], 'state', 'pending', 'attempts', 0,
    'owner', me, 'until', now + tonumber(ARGV[7]), 'added', now)
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
  redis.call('ZADD', KEYS[2], now, id)
  return 1
end

local d = redis.call('HMGET', KEYS[1], 'state', 'owner', 'until', 'payload', 'url', 'attempts')
if op == 'take' then
  if d[1] ~= 'pending' then
    redis.call('ZREM', KEYS[2], id)
    return false
  end
  if d[2] ~= me and now < tonumber(d[3]) then
    return false
  end
  redis.call('HSET', KEYS[1], 'owner', me, 'until', now + tonumber(ARGV[4]))
  return {d[4], d[5], tonumber(d[6])}
end

-- done
if d[1] ~= 'pending' or d[2] ~= me then
  return 0
end
local result = ARGV[4]
if result == 'retry' then
  local due = now + tonumber(ARGV[5])
  redis.call('HSET', KEYS[1], 'attempts', tonumber(d[6]) + 1, 'until', due + tonumber(ARGV[7]), 'error', ARGV[6])
  redis.call('ZADD', KEYS[2], due, id)
  return 1
end
redis.call('HSET', KEYS[1], 'state', result, 'attempts', tonumber(d[6]) + 1, 'error', ARGV[6], 'settled', now)
redis.call('ZREM', KEYS[2], id)
return 1
