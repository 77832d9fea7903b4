-- One replica's exchange for one paced dependency, atomic in Redis.
-- KEYS: 1 tallies (hash), 2 wants (hash), 3 owner ("replica granted_ms"), 4 rate (string),
--       5 wants by class (hash)
-- ARGV: 1 replica, 2 lease ms, 3 sent, 4 accepted, 5 overloaded,
--       6 timed out, 7 ms since the newest overload's window began (-1: none),
--       8 want (attempts/s), 9 members, 10 want by class ("critical default sheddable")
-- Returns {owner (1/0), taken (flat field/value list, owner only),
--          others ("want members [critical default sheddable]" strings),
--          rate ("rate probing at_ms [handover]") or false, now_ms}. Numbers
--          cross as strings: Redis truncates Lua numbers in replies to
--          integers. The wants by class are a hash of their own, which a
--          replica that does not know classes neither writes nor reads: its
--          want counts as the default class's.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local replica, lease = ARGV[1], tonumber(ARGV[2])
local kept = 10 * lease

redis.call('HINCRBY', KEYS[1], 'sent', ARGV[3])
redis.call('HINCRBY', KEYS[1], 'accepted', ARGV[4])
redis.call('HINCRBY', KEYS[1], 'overloaded', ARGV[5])
redis.call('HINCRBY', KEYS[1], 'timed_out', ARGV[6])
local age = tonumber(ARGV[7])
if age >= 0 then
  local began = now - age
  local newest = tonumber(redis.call('HGET', KEYS[1], 'overloaded_at') or '-1')
  if began > newest then
    redis.call('HSET', KEYS[1], 'overloaded_at', began)
  end
end
redis.call('PEXPIRE', KEYS[1], kept)

redis.call('HSET', KEYS[2], replica, ARGV[8] .. ' ' .. ARGV[9] .. ' ' .. now)
redis.call('PEXPIRE', KEYS[2], kept)
redis.call('HSET', KEYS[5], replica, ARGV[10] .. ' ' .. now)
redis.call('PEXPIRE', KEYS[5], kept)

-- The owner key holds "replica granted_ms". A lease granted in the store's
-- future was granted before its clock stepped back (a failover to a server
-- behind): Redis keeps its expiry as a time on the old clock, so it would
-- outlive its lease by the step, and the pace would go unowned (its rate
-- unpublished) that long if its owner is gone. It is over.
local held = redis.call('GET', KEYS[3])
local owner, granted
if held then
  owner, granted = string.match(held, '^(.+) (%d+)$')
  owner = owner or held
  if granted and tonumber(granted) > now then
    owner = nil
  end
end
if not owner or owner == replica then
  redis.call('SET', KEYS[3], replica .. ' ' .. now, 'PX', lease)
  owner = replica
end

local taken = {}
if owner == replica then
  taken = redis.call('HGETALL', KEYS[1])
  redis.call('DEL', KEYS[1])
  for i = 1, #taken, 2 do
    if taken[i] == 'overloaded_at' then
      -- A store whose clock stepped back (a failover to a server behind)
      -- finds the overload in its future: it began no later than now.
      taken[i + 1] = tostring(math.max(0, now - tonumber(taken[i + 1])))
    end
  end
end

local others = {}
local wants = redis.call('HGETALL', KEYS[2])
for i = 1, #wants, 2 do
  if wants[i] ~= replica then
    local want, members, at = string.match(wants[i + 1], '^(%S+) (%S+) (%S+)$')
    -- A want from the store's future (its clock stepped back since) is of
    -- no age anyone can tell: dropped; a live replica writes it anew.
    if at and tonumber(at) <= now and now - tonumber(at) < lease then
      local entry = want .. ' ' .. members
      -- Its classes, if it wrote them lately and they read as numbers:
      -- else its want counts as the default class's.
      local written = redis.call('HGET', KEYS[5], wants[i]) or ''
      local c, d, s, at = string.match(written, '^(%S+) (%S+) (%S+) (%S+)$')
      at = tonumber(at)
      if at and tonumber(c) and tonumber(d) and tonumber(s) and at <= now and now - at < lease then
        entry = entry .. ' ' .. c .. ' ' .. d .. ' ' .. s
      end
      table.insert(others, entry)
    else
      redis.call('HDEL', KEYS[2], wants[i])
    end
  end
end

return {owner == replica and 1 or 0, taken, others, redis.call('GET', KEYS[4]), tostring(now)}
