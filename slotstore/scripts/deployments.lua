-- deployments: publish a key prefix and its jobs in a registry shared by
-- every deployment on this Redis, and read the others back, so that one job
-- run under two prefixes (a typo, or a rolling deploy that changed it) is
-- noticed. A field per prefix holds "<seen_ms> <job>,<job>,...".
--
-- KEYS[1]  the shared registry: a hash, field = key prefix
-- ARGV[1]  this deployment's key prefix
-- ARGV[2]  its jobs, comma-separated
-- ARGV[3]  the stale window, ms: an entry older than this is not live
--
-- Returns {now_ms, field, value, ...}: every live prefix but this one
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local stale = tonumber(ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], now .. ' ' .. ARGV[2])
local out = {now}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local seen = tonumber(string.match(all[i + 1], '^(%d+) ')) or 0
  if now - seen > 10 * stale then
    redis.call('HDEL', KEYS[1], all[i])
  elseif all[i] ~= ARGV[1] and now - seen < stale then
    out[#out + 1] = all[i]
    out[#out + 1] = all[i + 1]
  end
end
return out
