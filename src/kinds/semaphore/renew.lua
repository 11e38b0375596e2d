-- Renew the leases of a batch of semaphore holds (the watchdog).
--
-- KEYS and ARGV as ../batch.lua says, a key being the semaphore's name
-- and ARGV[1] the lease in ms.  Gives each owner's permits the lease,
-- never bringing back one that is gone (its lease ended: anyone may have
-- taken it back).  Returns one 1 (renewed) or 0 (not held) per hold.
--@include ../batch.lua
--@include ../permits.lua
local now = rlock_now()
return rlock_batch(function(key, owner)
	local score = redis.pcall('zscore', rlock_timeout_of(key), owner .. ':1')
	if type(score) == 'table' then
		return score
	end
	return (score and tonumber(score) > now) and 1 or 0
end, function(key, owner)
	local timeout = rlock_timeout_of(key)
	rlock_lease(timeout, owner, 1, rlock_counted(timeout, owner),
		now + tonumber(ARGV[1]), 'xx')
end)
