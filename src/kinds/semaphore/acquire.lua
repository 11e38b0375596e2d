-- The semaphore's acquire: leave the owner holding ARGV[3] permits.
--
-- KEYS[1]  the semaphore's available count (NAME)
-- KEYS[2]  its permits held ({NAME}:timeout)
-- KEYS[3]  its channel, redisson_sc:{NAME} (not in a Redis Cluster)
-- ARGV[1]  lease in ms
-- ARGV[2]  owner
-- ARGV[3]  permits to leave the owner holding
-- ARGV[4]  permits the owner held before (0: a first take)
-- ARGV[5]  the publish command, and after it what ../publish.lua says
--
-- First gives back the permits whose lease ended (telling the waiters
-- the count, as Redisson does).  If enough are available, takes what the
-- owner lacks, and gives all its permits the lease.  Returns {status,
-- value}: 1 granted, 2 granted but the owner's earlier permits were
-- gone, 0 too few available, 3 too few and the earlier permits gone;
-- value, when not granted, is the time in ms until the nearest lease of
-- a held permit ends (a wait may try again then), -1 when none has one
-- that ends.  A score below zero is no lease that ends: nobody gives
-- such a permit back (Redisson neither), and a waiter told 0 would try
-- again at once, over and over.  A name that is not a string (another
-- kind) fails with WRONGTYPE.
--@include ../publish.lua
--@include ../permits.lua
local now = rlock_now()
local back = rlock_reclaim(now)
local count = tonumber(redis.call('get', KEYS[1]) or '0')
if back > 0 then
	rlock_publish(3, 5, tostring(count))
end
local target = tonumber(ARGV[3])
local have = rlock_owned(KEYS[2], ARGV[2])
local lost = tonumber(ARGV[4]) > have
local need = target - have
if need > 0 and count < need then
	local first = redis.call('zrangebyscore', KEYS[2], now, '+inf',
		'withscores', 'limit', 0, 1)
	local wait = -1
	if first[2] and tonumber(first[2]) < 922337203685477 then
		wait = tonumber(first[2]) - now
	end
	return {lost and 3 or 0, wait}
end
if need > 0 then
	redis.call('decrby', KEYS[1], need)
end
rlock_lease(KEYS[2], ARGV[2], 1, target, now + tonumber(ARGV[1]))
local ttl = redis.call('pttl', KEYS[1])
if ttl > 0 then
	redis.call('pexpire', KEYS[2], ttl)
end
return {lost and 2 or 1, 0}
