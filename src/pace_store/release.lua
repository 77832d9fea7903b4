-- A replica shutting down gives up the paces it owns, so that another
-- takes them at its next exchange rather than a lease later.
-- KEYS: 1 owner ("replica granted_ms"); ARGV: 1 replica
-- Returns 1 if it owned the pace, 0 if not.
local held = redis.call('GET', KEYS[1]) or ''
if (string.match(held, '^(.+) %d+$') or held) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
