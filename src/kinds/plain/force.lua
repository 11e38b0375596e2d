-- Remove a Redisson RLock whoever holds it, and wake its waiters: what
-- Redisson's forceUnlock() does.
--
-- KEYS[1]  the lock
-- KEYS[2]  its unlock channel
-- ARGV[1]  the publish command
--
-- Returns 1 when a lock was removed (and "0" published), 0 when there was
-- none.
if redis.call('del', KEYS[1]) == 1 then
	redis.call(ARGV[1], KEYS[2], '0')
	return 1
end
return 0
