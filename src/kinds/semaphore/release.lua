-- The semaphore's release: leave the owner holding ARGV[2] permits.
--
-- KEYS[1]  the semaphore's available count (NAME)
-- KEYS[2]  its permits held ({NAME}:timeout)
-- KEYS[3]  its channel, redisson_sc:{NAME} (not in a Redis Cluster)
-- ARGV[1]  owner
-- ARGV[2]  permits to leave
-- ARGV[3]  lease in ms of those left
-- ARGV[4]  the publish command, and after it what ../publish.lua says
--
-- First gives back the permits whose lease ended, the owner's among them
-- (a lease that ran out is not renewed by a release: the hold is lost).
-- Returns nil when the owner holds no permit, else the number of permits
-- given back (0: none, the lease of those left reset).  Permits given
-- back go to the available count, which is published: Redisson's
-- waiters, which have no timer, wake only on that message.  They are
-- counted back before they are removed: a count Redis refuses (not an
-- integer) fails the release before it changes anything.
--@include ../publish.lua
--@include ../permits.lua
local now = rlock_now()
if rlock_reclaim(now) > 0 then
	rlock_publish(3, 4, redis.call('get', KEYS[1]))
end
local have = rlock_owned(KEYS[2], ARGV[1])
if have == 0 then
	return nil
end
local target = tonumber(ARGV[2])
if target >= have then
	rlock_lease(KEYS[2], ARGV[1], 1, have, now + tonumber(ARGV[3]), 'xx')
	return 0
end
local count = redis.call('incrby', KEYS[1], have - target)
local gone = {}
for i = target + 1, have do
	gone[#gone + 1] = ARGV[1] .. ':' .. i
end
for i = 1, #gone, 256 do
	redis.call('zrem', KEYS[2], unpack(gone, i, math.min(i + 255, #gone)))
end
rlock_lease(KEYS[2], ARGV[1], 1, target, now + tonumber(ARGV[3]), 'xx')
rlock_publish(3, 4, tostring(count))
return have - target
