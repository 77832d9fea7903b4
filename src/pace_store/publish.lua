-- The owner publishes the fleet's rate for one dependency, atomic in Redis,
-- and only while it still owns the pace: a replica whose ownership lapsed
-- while its answer was on the way must not overwrite its successor's.
-- KEYS: 1 owner, 2 rate; ARGV: 1 replica, 2 lease ms, 3 rate, 4 probing (1/0),
--       5 channel, 6 what the owner's law learned (JSON without spaces), or ''
-- Returns 1 if published, 0 if this replica no longer owns the pace.
local held = redis.call('GET', KEYS[1]) or ''
if (string.match(held, '^(.+) %d+$') or held) ~= ARGV[1] then
  return 0
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local value = ARGV[3] .. ' ' .. ARGV[4] .. ' ' .. now
if ARGV[6] ~= '' then
  value = value .. ' ' .. ARGV[6]
end
redis.call('SET', KEYS[2], value, 'PX', 10 * tonumber(ARGV[2]))
redis.call('PUBLISH', ARGV[5], value)
return 1
