-- Tell who this instance is, for other instances' rlock_holder(): its
-- readable name and the process of each session that holds locks.
--
-- KEYS[1]  this instance's registry hash, rlock_instance:{<uuid>}
-- ARGV[1]  how long the entry lives, in ms (renewed before it ends)
-- ARGV[2]  the instance's name
-- ARGV[i], ARGV[i + 1] from 3 on: a session's owner number and its pid
--
-- The hash is rewritten whole, so sessions that ended leave it.
redis.call('del', KEYS[1])
redis.call('hset', KEYS[1], 'name', ARGV[2])
for i = 3, #ARGV - 1, 2 do
	redis.call('hset', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('pexpire', KEYS[1], ARGV[1])
return 1
