-- Check a batch of locks before a commit.
--
-- KEYS and ARGV as ../batch.lua says, ARGV[1] being the safety margin in
-- ms.
--
-- For every lock its owner still holds, makes sure at least the margin of
-- lease is left, extending it if not.  Returns one 1 (held) or 0 (not
-- held: lost) per lock; in a cluster, 2 for a lock this node cannot
-- answer for (../batch.lua).
--@include ../batch.lua
return rlock_batch(function(key, owner)
	return redis.pcall('hexists', key, owner)
end, function(key)
	local ttl = redis.call('pttl', key)
	if ttl >= 0 and ttl < tonumber(ARGV[1]) then
		redis.call('pexpire', key, ARGV[1])
	end
end)
