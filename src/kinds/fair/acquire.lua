-- Take a Redisson fair lock (getFairLock) for an owner in its queue's
-- order, or queue the owner and say how long it may sleep.
--
-- KEYS[1]  the lock (a hash as the plain lock's: owner -> hold count, a
--          PEXPIRE lease, and "mode" = "write")
-- KEYS[2]  its queue, redisson_lock_queue:{key}
-- KEYS[3]  its owners' deadlines, redisson_lock_timeout:{key}
-- KEYS[4]  its fencing token counter, when the caller asks for a token
-- ARGV[1]  lease in ms
-- ARGV[2]  owner ("<uuid>:<n>")
-- ARGV[3]  hold count to leave
-- ARGV[4]  the owner's wait in ms, for an owner that may wait: how long
--          its queue entry lasts (Redisson's tryLock wait, or
--          fairLockWaitTimeout for lock()); 0: a try that does not queue
--          (tryLock() without a wait does not either)
--
-- Redisson's rules, so that its clients and rlock keep one queue: the lock
-- is taken when it is free and the queue is empty or headed by the owner
-- (whose entry goes, and whose wait is taken off the deadline of every
-- owner still queued), or on re-entry.  Else an owner that may wait is
-- queued once, behind the last owner queued, its deadline that owner's
-- plus its wait (first in line: the lock's lease left plus its wait);
-- an owner whose entry's deadline has passed counts as gone, and the
-- next script of any client drops it once it heads the queue.
--
-- Returns what the plain kind's acquire.lua returns: {1, token, 0}
-- taken, {2, token, 0} taken although the owner expected to hold it;
-- {0, ms, 0} not taken, ms being the longest the owner should sleep (the
-- lease left, -1 for a lock without expiry, which the worker looks at
-- again now and then as for the plain kind; or, the lock free but others
-- ahead, until the head's entry would go stale); {3, ms, 0} not taken
-- although expected to hold it.
--@include ../queue.lua
local now = rlock_now()
rlock_pop_gone(KEYS[2], KEYS[3], now)
local target = tonumber(ARGV[3])
local wait = tonumber(ARGV[4])
local held = redis.call('hexists', KEYS[1], ARGV[2]) == 1
local head = redis.call('lindex', KEYS[2], 0)
if held or (redis.call('exists', KEYS[1]) == 0 and
			(not head or head == ARGV[2])) then
	local token = 0
	if #KEYS > 3 then
		token = redis.call('incr', KEYS[4])
	end
	if not held and head == ARGV[2] then
		redis.call('lpop', KEYS[2])
		redis.call('zrem', KEYS[3], ARGV[2])
		for _, owner in ipairs(redis.call('zrange', KEYS[3], 0, -1)) do
			redis.call('zincrby', KEYS[3], -wait, owner)
		end
	end
	redis.call('hset', KEYS[1], ARGV[2], target, 'mode', 'write')
	redis.call('pexpire', KEYS[1], ARGV[1])
	if target > 1 and not held then
		return {2, token, 0}
	end
	return {1, token, 0}
end
local pttl = redis.call('pttl', KEYS[1])
if wait > 0 and not redis.call('zscore', KEYS[3], ARGV[2]) then
	local deadline = now + math.max(pttl, 0)
	local last = redis.call('lindex', KEYS[2], -1)
	if last then
		deadline = tonumber(redis.call('zscore', KEYS[3], last)) or deadline
	end
	redis.call('zadd', KEYS[3], deadline + wait, ARGV[2])
	redis.call('rpush', KEYS[2], ARGV[2])
	head = head or ARGV[2]
end
local ms = pttl
if ms == 0 or ms == -2 then
	ms = 1
	if head and head ~= ARGV[2] then
		local deadline = tonumber(redis.call('zscore', KEYS[3], head))
		if deadline then
			ms = math.max(deadline - now, 1)
		end
	end
end
if target > 1 then
	return {3, ms, 0}
end
return {0, ms, 0}
