-- receipt_lib: the release receipt, prepended to the release scripts; not
-- run on its own.
--
-- KEYS[2]  (of the script it is prepended to; absent when the lock has no
--          receipt, see releaseKeys) the lock's release receipt: a string
--          "released <token>", the token of the lock's last release, kept
--          for a while, so that a release whose answer was lost and that
--          the client sent again finds it released by its own token.
-- Returns  nothing itself.

-- released_by reports whether the receipt holds token. A key of that name
-- that is not a receipt (another lock's, of any type) holds no token.
local function released_by(token)
  if not KEYS[2] then
    return false
  end
  local v = redis.pcall('GET', KEYS[2]) -- a hash answers an error: not a receipt
  return v == 'released ' .. token
end

-- write_receipt makes the receipt hold token for ms milliseconds, unless a
-- key of that name is not a receipt: it is never written over (it may be
-- another lock that a caller named so), and the release then keeps no
-- receipt.
local function write_receipt(token, ms)
  if not KEYS[2] then
    return
  end
  local v = redis.pcall('GET', KEYS[2])
  if v == false or (type(v) == 'string' and string.sub(v, 1, 9) == 'released ') then
    redis.call('SET', KEYS[2], 'released ' .. token, 'PX', ms)
  end
end
