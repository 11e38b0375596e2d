-- Renew the leases of a batch of locks (the watchdog).
--
-- KEYS and ARGV as ../batch.lua says, ARGV[1] being the lease in ms.
--
-- Resets the lease of every lock its owner still holds, and never brings
-- back one it does not.  Returns one 1 (renewed) or 0 (not held: stop
-- renewing) per lock; in a cluster, 2 for a lock this node cannot answer
-- for (../batch.lua).
--@include ../batch.lua
return rlock_batch(function(key, owner)
	return redis.pcall('hexists', key, owner)
end, function(key)
	redis.call('pexpire', key, ARGV[1])
end)
