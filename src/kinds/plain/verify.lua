-- Check a batch of locks before a commit.
--
-- KEYS[i]      a lock
-- ARGV[1]      safety margin in ms
-- ARGV[i + 1]  the owner of KEYS[i]
--
-- For every lock its owner still holds, makes sure at least the margin of
-- lease is left, extending it if not.  Returns one 1 (held) or 0 (not
-- held: lost) per key.
local result = {}
for i = 1, #KEYS do
	if redis.pcall('hexists', KEYS[i], ARGV[i + 1]) == 1 then
		local ttl = redis.call('pttl', KEYS[i])
		if ttl >= 0 and ttl < tonumber(ARGV[1]) then
			redis.call('pexpire', KEYS[i], ARGV[1])
		end
		result[i] = 1
	else
		result[i] = 0
	end
end
return result
