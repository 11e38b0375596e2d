-- The ticket kind's release.
--
-- KEYS[1]  the lock
-- KEYS[2]  its channel (not in a Redis Cluster)
-- ARGV[1]  owner
-- ARGV[2]  amount to leave
-- ARGV[3]  lease in ms of what remains
-- ARGV[4]  the publish command, and after it what ../../../src/kinds/publish.lua says
--
-- Returns nil when the owner holds nothing, 0 when some remains, 1 when
-- the lock was freed and "free" published.
--@include ../../../src/kinds/publish.lua
local v = redis.call('get', KEYS[1])
if not v or string.sub(v, 1, #ARGV[1] + 1) ~= ARGV[1] .. ' ' then
	return nil
end
if tonumber(ARGV[2]) > 0 then
	redis.call('set', KEYS[1], ARGV[1] .. ' ' .. ARGV[2], 'px', ARGV[3])
	return 0
end
redis.call('del', KEYS[1])
rlock_publish(2, 4, 'free')
return 1
