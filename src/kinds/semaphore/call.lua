-- The semaphore's calls (semaphore.c's SEMAPHORE_CALL_*), as Redisson's
-- permit-expirable semaphore makes them.
--
-- KEYS[1]  the semaphore's available count (NAME)
-- KEYS[2]  its permits held ({NAME}:timeout)
-- KEYS[3]  its channel, redisson_sc:{NAME} (not in a Redis Cluster)
-- ARGV[1]  which call: 1 set the permits if never set (trySetPermits:
--          1 if set, 0 if it was), 2 add ARGV[2] permits, which may be
--          negative (addPermits: the new count), 3 the available count
--          after giving back the permits whose lease ended
-- ARGV[2]  the call's number
-- ARGV[3]  the publish command, and after it what ../publish.lua says
--
-- A name that is not a string (another kind) fails with WRONGTYPE; a
-- count that is no integer Lua holds exactly fails, and so does an
-- addition that would leave one, changing nothing (the sum is Redis's
-- INCRBY, an integer as Redisson's DECRBY expects).
--@include ../publish.lua
--@include ../permits.lua
local which = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
local inexact = 'ERR the semaphore\'s count is not an integer below 2^53 in magnitude, which rlock cannot count with'
if which == 1 then
	if redis.call('get', KEYS[1]) then
		return 0
	end
	redis.call('set', KEYS[1], n)
	if n > 0 then
		rlock_publish(3, 3, tostring(n))
	end
	return 1
end
if which == 2 then
	local count = rlock_exact(redis.call('get', KEYS[1]))
	if not count or not rlock_exact(count + n) then
		return redis.error_reply(inexact)
	end
	count = redis.call('incrby', KEYS[1], n)
	if n > 0 then
		rlock_publish(3, 3, tostring(n))
	end
	return count
end
local back = rlock_reclaim(rlock_now())
local count = rlock_exact(redis.call('get', KEYS[1]))
if not count then
	return redis.error_reply(inexact)
end
if back > 0 then
	rlock_publish(3, 3, tostring(count))
end
return count
