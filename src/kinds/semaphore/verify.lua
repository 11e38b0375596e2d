-- Check a batch of semaphore holds before a commit.
--
-- KEYS and ARGV as ../batch.lua says, a key being the semaphore's name
-- and ARGV[1] the safety margin in ms.  An owner holds its permits while
-- their lease has not ended; a lease with less than the margin left is
-- extended to it.  Returns one 1 (held) or 0 (lost) per hold.
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
		now + tonumber(ARGV[1]), 'xx', 'gt')
end)
