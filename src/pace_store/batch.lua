-- Whether one instance's report batch is counted for the first time,
-- fleet-wide, atomic in Redis: its last few batch numbers are kept in a
-- list that lapses once the instance has sent nothing for the window.
-- KEYS: 1 the instance's batch numbers (list)
-- ARGV: 1 batch number, 2 window ms, 3 numbers remembered
-- Returns 1 the first time a number is seen, 0 after.
if redis.call('LPOS', KEYS[1], ARGV[1]) then
  return 0
end
redis.call('LPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[3]) - 1)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
