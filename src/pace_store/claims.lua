-- One replica's share of a fleet-scoped retry budget's claims, atomic in
-- Redis: it keeps what this replica's processes claim, drops replicas not
-- heard from within the window, and answers what the others claim.
-- KEYS: 1 the dependency's claims (hash: replica -> "rate processes at_ms")
-- ARGV: 1 replica, 2 requests a second, 3 processes, 4 window ms
-- Returns {requests a second, processes} of the other replicas, as strings:
-- Redis truncates Lua numbers in replies to integers.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local window = tonumber(ARGV[4])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. now)
redis.call('PEXPIRE', KEYS[1], window)
local rate, processes = 0, 0
local claims = redis.call('HGETALL', KEYS[1])
for i = 1, #claims, 2 do
  if claims[i] ~= ARGV[1] then
    local r, p, at = string.match(claims[i + 1], '^(%S+) (%S+) (%S+)$')
    if at and now - tonumber(at) < window then
      rate = rate + tonumber(r)
      processes = processes + tonumber(p)
    else
      redis.call('HDEL', KEYS[1], claims[i])
    end
  end
end
return {tostring(rate), tostring(processes)}
