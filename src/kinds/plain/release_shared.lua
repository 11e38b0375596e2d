-- Give back shared holds on a lock (acquire_shared.lua), and wake its
-- waiters when nobody holds it any more.
--
-- KEYS[1]  the lock
-- KEYS[2]  its unlock channel (not in a Redis Cluster)
-- ARGV[1]  the owner's reader field
-- ARGV[2]  hold count to leave
-- ARGV[3]  lease in ms for the holds that remain
-- ARGV[4]  the publish command
-- ARGV[5]  in a Redis Cluster: the unlock channel (see ../publish.lua)
-- ARGV[6]  in a Redis Cluster: a second publish command, or none
--
-- A release that leaves one reader publishes "1" on the lock's channel
-- when an upgrade waits (its mark rlock_upgrade:{key}, acquire.lua), so
-- that the remaining reader, if it is the one waiting, may try.
--
-- Returns nil when the owner has no shared hold; 0 when the lock stays
-- held (by the owner's remaining holds, their lease reset, or by others);
-- when the lock was freed, 1 plus the number of subscribers its messages
-- reached, as release.lua.  The message on redisson_rwlock:{name} is then
-- "0", as Redisson's read unlock publishes (see ../publish.lua).
--
-- Whether others still hold it is Redisson's read release rule, so that
-- the outcome does not depend on who releases last: a writer of the same
-- session ("mode" = "write") holds it; a reader holds it while one of
-- its timeout keys 1..count has time left (the longest becomes the
-- hash's lease: ../readers.lua), and a reader whose keys are all gone
-- counts as gone.
--@include ../publish.lua
--@include ../readers.lua
local name = KEYS[1]
local base = name
if not string.find(name, '{', 1, true) then
	base = '{' .. name .. '}'
end
if redis.call('hexists', name, ARGV[1]) == 0 then
	return nil
end
local timeout = base .. ':' .. ARGV[1] .. ':rwlock_timeout:1'
if tonumber(ARGV[2]) > 0 then
	redis.call('hset', name, ARGV[1], ARGV[2])
	redis.call('set', timeout, 1, 'px', ARGV[3])
	if redis.call('pttl', name) < tonumber(ARGV[3]) then
		redis.call('pexpire', name, ARGV[3])
	end
	return 0
end
redis.call('hdel', name, ARGV[1])
redis.call('del', timeout)
if redis.call('hget', name, 'mode') == 'write' then
	return 0
end
local longest = rlock_readers_left(name)
if longest > 0 then
	redis.call('pexpire', name, longest)
	-- one reader left, which may be waiting to upgrade (its mark:
	-- acquire.lua): "1" on the lock's channel lets it try
	if redis.call('hlen', name) == 2 then
		local mark = 'rlock_upgrade:' .. base
		if redis.pcall('exists', mark) == 1 then
			redis.pcall('del', mark)
			rlock_publish(2, 4, '1')
		end
	end
	return 0
end
return 1 + rlock_free(2, 4, '0')
