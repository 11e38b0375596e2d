-- Check a batch of locks before a commit.
--
-- KEYS and ARGV as ../batch.lua says, ARGV[1] being the safety margin in
-- ms.
--
-- For every lock its owner still holds, makes sure at least the margin of
-- lease is left, extending it if not (a shared hold's timeout key too: a
-- shared hold whose key is gone is not held, ../batch.lua).  Returns one 1 (held) or 0 (not
-- held: lost) per lock; in a cluster, 2 for a lock this node cannot
-- answer for (../batch.lua).
--@include ../batch.lua
local function extend(key)
	local ttl = redis.call('pttl', key)
	if ttl >= 0 and ttl < tonumber(ARGV[1]) then
		redis.call('pexpire', key, ARGV[1])
	end
end
return rlock_batch(rlock_held, function(key, owner)
	local timeout = rlock_reader(key, owner)
	if timeout then
		extend(timeout)
	end
	extend(key)
end)
