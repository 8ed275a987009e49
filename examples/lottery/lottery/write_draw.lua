-- write_draw: store one slot's draw, fenced twice. The writer must still own
-- its slot: the slot's record (kept by the scheduler's store, under the same
-- hash tag) must be running with the writer's fence. A slot taken over or
-- abandoned while its owner was paused has another fence in its record, so
-- the paused owner's late write is refused even if nobody has drawn since.
-- And a writer whose fence is lower than the highest already written is
-- refused, as any fenced store would.
--
-- KEYS[1]  the highest fence written so far (a string)
-- KEYS[2]  the slot's draw: a hash (winners, replica, fence)
-- KEYS[3]  every draw, one JSON line each (a list)
-- KEYS[4]  the slot's record in the scheduler's store (a string that starts
--          "<state> <fence> ": slotstore.RecordKey)
-- ARGV[1]  the writer's fence
-- ARGV[2]  the winners, comma-separated
-- ARGV[3]  the writer's replica ID
-- ARGV[4]  the draw as one JSON line
--
-- Returns {"written"}                the draw is stored and listed
--         {"stale", why}             refused: the record is no longer the
--                                    writer's, or a newer owner has written
--         {"exists", fence}          the slot already has a draw (an earlier
--                                    attempt wrote it): nothing changes
local fence = ARGV[1]
local state, owner_fence = string.match(redis.call('GET', KEYS[4]) or '', '^(%S+) (%S+) ')
if owner_fence ~= fence or state ~= 'running' then
  return {'stale', 'the slot record is ' .. (state or 'gone') .. ' with fence ' .. (owner_fence or 'none')}
end
local top = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(fence) < top then
  return {'stale', 'fence ' .. top .. ' has written since'}
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return {'exists', redis.call('HGET', KEYS[2], 'fence')}
end
redis.call('SET', KEYS[1], fence)
redis.call('HSET', KEYS[2], 'winners', ARGV[2], 'replica', ARGV[3], 'fence', fence)
redis.call('RPUSH', KEYS[3], ARGV[4])
return {'written'}
