-- Remove a Redisson RLock whoever holds it, and wake its waiters: what
-- Redisson's forceUnlock() does, except that a key not shaped like a lock
-- (another type, a hash of other data) is left alone, and so is a
-- Redisson read-write lock (its waiters listen on another channel;
-- acquire.lua tells it apart).
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
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == 'read' then
	return redis.error_reply('WRONGTYPE the key holds a Redisson read lock (getReadWriteLock), not an RLock')
end
if mode == 'write' then
	for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
		if string.sub(field, -6) == ':write' then
			return redis.error_reply('WRONGTYPE the key holds a Redisson write lock (getReadWriteLock), not an RLock')
		end
	end
end
rlock_free(1)
return 1
