-- write_draw: store one slot's draw, fenced. A writer whose fence is lower
-- than the highest fence already written (a paused former owner that woke up
-- after its lease was lost) is refused, and nothing changes.
--
-- KEYS[1]  the highest fence written so far (a string)
-- KEYS[2]  the slot's draw: a hash (winners, replica, fence)
-- KEYS[3]  every draw, one JSON line each (a list)
-- ARGV[1]  the writer's fence
-- ARGV[2]  the winners, comma-separated
-- ARGV[3]  the writer's replica ID
-- ARGV[4]  the draw as one JSON line
--
-- Returns {"written"}             the draw is stored and listed
--         {"stale", top_fence}    refused: a newer owner has written since
--         {"exists", fence}       the slot already has a draw (an earlier
--                                 attempt wrote it): nothing changes
local top = tonumber(redis.call('GET', KEYS[1]) or '0')
local fence = tonumber(ARGV[1])
if fence < top then
  return {'stale', top}
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return {'exists', redis.call('HGET', KEYS[2], 'fence')}
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[2], 'winners', ARGV[2], 'replica', ARGV[3], 'fence', ARGV[1])
redis.call('RPUSH', KEYS[3], ARGV[4])
return {'written'}
