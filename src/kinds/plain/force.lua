-- Remove a lock of Redisson's family whoever holds it, and wake its
-- waiters: what Redisson's forceUnlock() does, for an RLock, a fair lock
-- or a read-write lock (both halves at once, their read holds' timeout
-- keys left to expire), except that a key not shaped like a lock (another
-- type, a hash of other data) is left alone.  The waiters of every lock of
-- the family are told (../publish.lua's rlock_free).
--
-- KEYS[1]  the lock
-- KEYS[2]  its unlock channel (not in a Redis Cluster)
-- ARGV[1]  the publish command
-- ARGV[2]  in a Redis Cluster: the unlock channel (see ../publish.lua)
-- ARGV[3]  in a Redis Cluster: a second publish command, or none
--
-- Returns 1 when a lock was removed (and "0" published), 0 when there was
-- none.
--@include ../shape.lua
--@include ../publish.lua
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'none' then
	return 0
end
if kind ~= 'hash' then
	return redis.error_reply('WRONGTYPE the key holds a ' .. kind ..
		', not a lock')
end
if not rlock_is_lock(KEYS[1]) then
	return redis.error_reply('WRONGTYPE the key holds a hash of other data, not a lock')
end
rlock_free(2, 1)
return 1
