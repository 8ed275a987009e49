-- pause: pause a job, or resume it. While a job's pause key exists, claim.lua
-- records each of its slots paused, with the note, and runs none. The pause
-- is stamped with Redis's clock, so every replica and status read one time.
--
-- KEYS[1]  the job's pause: a hash (note, by, at: ms on Redis's clock)
-- ARGV[1]  "pause" or "resume"
-- ARGV[2]  pause: the note
-- ARGV[3]  pause: who asked (user@host)
--
-- Returns 1 when the job's state changed (it was running and is paused, or
-- was paused and runs again; a pause that stands gets the new note), else 0
if ARGV[1] == 'resume' then
  return redis.call('DEL', KEYS[1])
end
local t = redis.call('TIME')
local existed = redis.call('EXISTS', KEYS[1])
redis.call('HSET', KEYS[1], 'note', ARGV[2], 'by', ARGV[3], 'at', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
return 1 - existed
