-- Compare-and-set of one dependency's fleet breaker episode, atomic in
-- Redis: the replica read the episode at a version, merged its share into
-- it, and writes it back only if no other replica wrote since. A merge that
-- changed nothing (most shares while the breaker is open) only keeps the
-- episode alive: it does not bump the version, which would make every other
-- replica's merge of that moment lose and read again. Beside the episode
-- each replica's word of itself (its rules and demand, which change at every
-- share) is kept in its own field, written without a version.
-- KEYS: 1 the episode (hash: version, episode, heard:<replica>...)
-- ARGV: 1 the version read ('' to read only), 2 the merged episode (JSON),
--       3 how long to keep it, in ms, 4 this replica's name, 5 its word
--       (JSON), 6... replicas whose words are stale, to forget
-- Returns {written (1/0), version, episode ('' if none), now_ms, {name,
-- word, ...}}: numbers cross as strings, as Redis truncates Lua numbers in
-- replies.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local version = redis.call('HGET', KEYS[1], 'version') or '0'
local function heard()
  local fields = redis.call('HGETALL', KEYS[1])
  local words = {}
  for i = 1, #fields, 2 do
    if string.sub(fields[i], 1, 6) == 'heard:' then
      table.insert(words, string.sub(fields[i], 7))
      table.insert(words, fields[i + 1])
    end
  end
  return words
end
if ARGV[1] == version then
  if redis.call('HGET', KEYS[1], 'episode') ~= ARGV[2] then
    version = tostring(tonumber(version) + 1)
    redis.call('HSET', KEYS[1], 'version', version, 'episode', ARGV[2])
  end
  redis.call('HSET', KEYS[1], 'heard:' .. ARGV[4], ARGV[5])
  for i = 6, #ARGV do
    redis.call('HDEL', KEYS[1], 'heard:' .. ARGV[i])
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {1, version, ARGV[2], tostring(now), heard()}
end
return {0, version, redis.call('HGET', KEYS[1], 'episode') or '', tostring(now), heard()}
