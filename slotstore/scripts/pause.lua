-- pause: pause a job, or resume it. While a job's state holds a pause,
-- claim.lua records each of its slots paused, with the note, and runs none.
-- The pause is stamped with Redis's clock, so every replica and status read
-- one time. It is written to the protocol-1 pause key too, which replicas of
-- an older version read, so that a pause reaches them while a deployment
-- upgrades.
--
-- KEYS[1]  the job's state: a hash (paused_by, paused_note, paused_at)
-- KEYS[2]  the job's protocol-1 pause: a hash (note, by, at)
-- ARGV[1]  "pause" or "resume"
-- ARGV[2]  pause: the note
-- ARGV[3]  pause: who asked (user@host)
--
-- Returns, for resume, 1 when the job was paused and runs again, else 0;
-- for pause, {changed, since}: changed is 1 when the job was running and is
-- paused, 0 when a pause stood (it gets the new note and who asked, and
-- keeps its time; a pause with no note leaves it as it is); since is when the pause that now stands began, ms on
-- Redis's clock. A pause sent again after its reply was lost finds its own
-- pause standing, with the same since: the caller's alert for it, named by
-- since, is then the same alert.
if ARGV[1] == 'resume' then
  local n = redis.call('HDEL', KEYS[1], 'paused_by', 'paused_note', 'paused_at')
  local m = redis.call('DEL', KEYS[2])
  if n + m > 0 then
    return 1
  end
  return 0
end
local t = redis.call('TIME')
local at = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local since = redis.call('HMGET', KEYS[1], 'paused_by', 'paused_at')
local changed = 1
if since[1] then
  changed, at = 0, tonumber(since[2]) or at
  if ARGV[2] == '' then
    -- No note: the standing pause stays as it is (its note, who asked),
    -- as worker pause and the HTTP pause promise, also when another pause
    -- landed between their read of it and this.
    return {changed, at}
  end
end
redis.call('HSET', KEYS[1], 'paused_by', ARGV[3], 'paused_note', ARGV[2], 'paused_at', at)
redis.call('HSET', KEYS[2], 'note', ARGV[2], 'by', ARGV[3], 'at', at)
return {changed, at}
