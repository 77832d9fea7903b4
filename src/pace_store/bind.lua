-- Who owns one instance, fleet-wide, atomic in Redis: the first verified
-- caller to name it takes it; its owner speaking renews the binding.
-- KEYS: 1 the instance's owner (string)
-- ARGV: 1 caller ("namespace/service-account", or "" for none), 2 TTL ms
-- Returns the owner after the call, or false if nobody owns the instance.
local owner = redis.call('GET', KEYS[1])
if owner and owner ~= ARGV[1] then
  return owner
end
if ARGV[1] == '' then
  return false
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return ARGV[1]
