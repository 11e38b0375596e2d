-- Give back holds of a Redisson RLock, and wake waiters when it is free.
--
-- KEYS[1]  the lock
-- KEYS[2]  its unlock channel (not in a Redis Cluster)
-- ARGV[1]  owner
-- ARGV[2]  hold count to leave
-- ARGV[3]  lease in ms for the holds that remain
-- ARGV[4]  the publish command
-- ARGV[5]  in a Redis Cluster: the unlock channel (a channel is no key:
--          declared, it makes a migrating slot answer TRYAGAIN)
-- ARGV[6]  in a Redis Cluster: a second publish command, or none
--
-- Returns nil when the owner has no hold (its lease ran out, or someone
-- removed it); 0 when holds remain (their lease reset to ARGV[3]); 1 when
-- the lock was freed and "0" published, as Redisson's unlock does.
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
	return nil
end
if tonumber(ARGV[2]) > 0 then
	redis.call('hset', KEYS[1], ARGV[1], ARGV[2])
	redis.call('pexpire', KEYS[1], ARGV[3])
	return 0
end
redis.call('del', KEYS[1])
if KEYS[2] then
	redis.call(ARGV[4], KEYS[2], '0')
else
	-- the lock is freed whatever becomes of the message
	redis.pcall(ARGV[4], ARGV[5], '0')
	if ARGV[6] then
		redis.pcall(ARGV[6], ARGV[5], '0')
	end
end
return 1
