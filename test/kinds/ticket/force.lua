-- The ticket kind's forced release: KEYS[1] the lock, KEYS[2] its channel
-- (not in a Redis Cluster), ARGV from 1 the publish commands.
--@include ../../../src/kinds/publish.lua
if redis.call('type', KEYS[1]).ok ~= 'string' then
	return 0
end
redis.call('del', KEYS[1])
rlock_publish(2, 1, 'free')
return 1
