-- The queue of a Redisson fair lock (getFairLock), for the fair kind's
-- scripts: a LIST of the owners waiting, in order, and a ZSET of their
-- deadlines (epoch ms), after which an owner that has not taken the lock
-- counts as gone.  Every script writes both or neither: a LIST entry
-- without a deadline wedges Redisson's own scripts (3.23 fails on it).
--
-- rlock_now() is Redis's clock in ms: one clock for every rlock instance
-- (Redisson's scripts take their client's).  rlock_pop_gone(queue,
-- deadlines, now) drops the entries at the head of the queue whose
-- deadline has passed, or that have none, as every Redisson fair script
-- does first; only heads go, so the order of the rest stays.  At most
-- RLOCK_POP_GONE heads a call, where Redisson's scripts drop them all: a
-- queue filled with owners gone (anyone who may write it can) must not
-- hold Redis, and the release or try that met it, past
-- rlock.command_timeout; the next call drops more.  Included on one line
-- (see embed-lua): no comment after code here.
local function rlock_now()
	local t = redis.call('time')
	return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local RLOCK_POP_GONE = 1000
local function rlock_pop_gone(queue, deadlines, now)
	for _ = 1, RLOCK_POP_GONE do
		local head = redis.call('lindex', queue, 0)
		if not head then
			return
		end
		local deadline = tonumber(redis.call('zscore', deadlines, head))
		if deadline and deadline > now then
			return
		end
		redis.call('lpop', queue)
		redis.call('zrem', deadlines, head)
	end
end
