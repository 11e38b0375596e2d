-- Renew the leases of a batch of locks (the watchdog).
--
-- KEYS and ARGV as ../batch.lua says, ARGV[1] being the lease in ms.
--
-- Resets the lease of every lock its owner still holds, and never brings
-- back one it does not.  A shared hold's lease is its timeout key's, and
-- the lock's is made at least as long, never shorter: other readers may
-- need more.  So is an exclusive hold's when the lock has more fields
-- than its owner and "mode": the same session's reader, whose lease may
-- be the longer.  Returns one 1 (renewed) or 0 (not held: stop
-- renewing) per lock; in a cluster, 2 for a lock this node cannot answer
-- for (../batch.lua).
--@include ../batch.lua
return rlock_batch(rlock_held, function(key, owner)
	local timeout = rlock_reader(key, owner)
	if timeout == nil then
		if redis.call('hlen', key) <= 2 or
			redis.call('pttl', key) < tonumber(ARGV[1]) then
			redis.call('pexpire', key, ARGV[1])
		end
		return
	end
	redis.call('pexpire', timeout, ARGV[1])
	if redis.call('pttl', key) < tonumber(ARGV[1]) then
		redis.call('pexpire', key, ARGV[1])
	end
end)
