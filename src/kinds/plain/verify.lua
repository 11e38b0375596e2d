-- Check a batch of locks before a commit.
--
-- KEYS[i]      a lock
-- ARGV[1]      safety margin in ms
-- ARGV[i + 1]  the owner of KEYS[i]
--
-- In a Redis Cluster, as in renew.lua: KEYS is empty, ARGV[2i] is a lock
-- and ARGV[2i + 1] its owner.
--
-- For every lock its owner still holds, makes sure at least the margin of
-- lease is left, extending it if not.  Returns one 1 (held) or 0 (not
-- held: lost) per lock; in a cluster, 2 for a lock this node cannot
-- answer for.
local result = {}
local keyed = #KEYS > 0
local n = keyed and #KEYS or (#ARGV - 1) / 2
for i = 1, n do
	local key = keyed and KEYS[i] or ARGV[2 * i]
	local owner = keyed and ARGV[i + 1] or ARGV[2 * i + 1]
	local held = redis.pcall('hexists', key, owner)
	if held == 1 then
		local ttl = redis.call('pttl', key)
		if ttl >= 0 and ttl < tonumber(ARGV[1]) then
			redis.call('pexpire', key, ARGV[1])
		end
		result[i] = 1
	elseif not keyed and type(held) == 'table' and held.err ~= nil and
		not string.find(held.err, 'WRONGTYPE', 1, true) then
		-- not served here (its slot moved), or not now (the cluster is
		-- down): neither lost nor kept; asked again, declared
		result[i] = 2
	else
		result[i] = 0
	end
end
return result
