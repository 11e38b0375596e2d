-- Give back holds of a Redisson RLock, and wake waiters when it is free.
--
-- KEYS[1]  the lock
-- KEYS[2]  its unlock channel (not in a Redis Cluster)
-- ARGV[1]  owner
-- ARGV[2]  hold count to leave
-- ARGV[3]  lease in ms for the holds that remain
-- ARGV[4]  the publish command
-- ARGV[5]  in a Redis Cluster: the unlock channel (see ../publish.lua)
-- ARGV[6]  in a Redis Cluster: a second publish command, or none
--
-- Returns nil when the owner has no hold (its lease ran out, or someone
-- removed it); 0 when holds remain (their lease reset to ARGV[3]); when
-- the lock was freed and "0" published, as Redisson's unlock does, 1 plus
-- the number of subscribers that heard it (the worker holds its own
-- waiters back once in a while only when someone else listens).
--
-- An owner whose session holds the lock shared as well (its reader field,
-- acquire_shared.lua) leaves it to that: the lock becomes a read lock,
-- whose readers may now enter, with the lease its readers have left
-- (../readers.lua), not what the exclusive hold had made it, and "1" is
-- published on both channels, as for a write unlock; 0 is returned, as
-- the lock stays held.  Redisson's write unlock publishes nothing then,
-- and its readers would wait for their lease.  When no reader has time
-- left the lock is freed.  While the reader is there, holds that remain
-- lengthen the lease and never shorten it, as acquire.lua does.
--@include ../publish.lua
--@include ../readers.lua
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
	return nil
end
if tonumber(ARGV[2]) > 0 then
	-- read before the first write, as acquire.lua does
	local set_lease = redis.call('hlen', KEYS[1]) <= 2 or
		redis.call('pttl', KEYS[1]) < tonumber(ARGV[3])
	redis.call('hset', KEYS[1], ARGV[1], ARGV[2])
	if set_lease then
		redis.call('pexpire', KEYS[1], ARGV[3])
	end
	return 0
end
if redis.call('hlen', KEYS[1]) > 2 then
	redis.call('hdel', KEYS[1], ARGV[1])
	local left = rlock_readers_left(KEYS[1])
	if left > 0 then
		redis.call('hset', KEYS[1], 'mode', 'read')
		redis.call('pexpire', KEYS[1], left)
		rlock_publish(2, 4, '1')
		rlock_publish_to(4, rlock_derived('redisson_rwlock:', KEYS[1]), '1')
		return 0
	end
end
return 1 + rlock_free(2, 4)
