-- An owner that waited for a Redisson fair lock gives up (its wait ran
-- out, it was cancelled, its session ended): it leaves the queue at once,
-- as Redisson's tryLock does when its wait runs out (its lock() never
-- does).
--
-- KEYS[1]  the lock
-- KEYS[2]  its queue, redisson_lock_queue:{key}
-- KEYS[3]  its owners' deadlines, redisson_lock_timeout:{key}
-- KEYS[4]  its unlock channel, unused (not in a Redis Cluster)
-- ARGV[1]  owner
-- ARGV[2]  the wait its entry was queued with (ms)
-- ARGV[3]  the publish command
-- ARGV[4]  in a Redis Cluster: the unlock channel, unused
-- ARGV[5]  in a Redis Cluster: a second publish command, or none
--
-- The owners behind it had their deadlines counted from its own: each
-- loses its wait, as in Redisson's.  If it headed the queue and the lock
-- is free, the new head is told on its channel ("0"): a Redisson 3.23
-- waiter may wait for nothing else.  Returns 1 if the owner was queued,
-- 0 if not.
--@include ../queue.lua
--@include ../publish.lua
if not redis.call('zscore', KEYS[3], ARGV[1]) then
	return 0
end
local queue = redis.call('lrange', KEYS[2], 0, -1)
local behind = false
for _, owner in ipairs(queue) do
	if behind then
		redis.call('zincrby', KEYS[3], -tonumber(ARGV[2]), owner)
	elseif owner == ARGV[1] then
		behind = true
	end
end
redis.call('zrem', KEYS[3], ARGV[1])
redis.call('lrem', KEYS[2], 0, ARGV[1])
if queue[1] == ARGV[1] and redis.call('exists', KEYS[1]) == 0 then
	rlock_pop_gone(KEYS[2], KEYS[3], rlock_now())
	local head = redis.call('lindex', KEYS[2], 0)
	if head then
		rlock_publish_to(3, rlock_derived('redisson_lock__channel:', KEYS[1]) ..
			':' .. head, '0')
	end
end
return 1
