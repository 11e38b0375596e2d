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
--@include ../publish.lua
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
	return nil
end
if tonumber(ARGV[2]) > 0 then
	redis.call('hset', KEYS[1], ARGV[1], ARGV[2])
	redis.call('pexpire', KEYS[1], ARGV[3])
	return 0
end
return 1 + rlock_free(4)
