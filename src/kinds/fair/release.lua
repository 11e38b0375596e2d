-- Give back holds of a Redisson fair lock, and wake the next owner of its
-- queue when it is free.
--
-- KEYS[1]  the lock
-- KEYS[2]  its queue, redisson_lock_queue:{key}
-- KEYS[3]  its owners' deadlines, redisson_lock_timeout:{key}
-- KEYS[4]  its unlock channel (not in a Redis Cluster)
-- ARGV[1]  owner
-- ARGV[2]  hold count to leave
-- ARGV[3]  lease in ms for the holds that remain
-- ARGV[4]  the publish command
-- ARGV[5]  in a Redis Cluster: the unlock channel (see ../publish.lua)
-- ARGV[6]  in a Redis Cluster: a second publish command, or none
--
-- Returns what the plain kind's release.lua returns: nil when the owner
-- has no hold, 0 when holds remain, and when the lock was freed 1 plus
-- the number of subscribers its messages reached.  Freeing it, the
-- entries of owners gone are dropped first, so that "0" reaches the first
-- owner still waiting, on its own channel (../publish.lua), as
-- Redisson's fair unlock does; the lock's channel and the read-write
-- lock's hear theirs too.  The queue is read under pcall: something else
-- at its keys costs the waiters their message, not the lock its release.
--@include ../queue.lua
--@include ../publish.lua
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
	return nil
end
if tonumber(ARGV[2]) > 0 then
	redis.call('hset', KEYS[1], ARGV[1], ARGV[2])
	redis.call('pexpire', KEYS[1], ARGV[3])
	return 0
end
pcall(rlock_pop_gone, KEYS[2], KEYS[3], rlock_now())
return 1 + rlock_free(4, 4)
