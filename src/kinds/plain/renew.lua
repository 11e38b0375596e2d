-- Renew the leases of a batch of locks (the watchdog).
--
-- KEYS[i]      a lock
-- ARGV[1]      lease in ms
-- ARGV[i + 1]  the owner of KEYS[i]
--
-- In a Redis Cluster the locks of one primary go in one call, over many
-- slots, so they are no declared keys: KEYS is empty, and ARGV[2i] is a
-- lock, ARGV[2i + 1] its owner.
--
-- Resets the lease of every lock its owner still holds, and never brings
-- back one it does not.  Returns one 1 (renewed) or 0 (not held: stop
-- renewing) per lock; in a cluster, 2 for a lock this node cannot answer
-- for (its slot moved, the cluster is down: ask again, with the key
-- declared).  A key of another type counts as not held rather than
-- failing the whole batch.
local result = {}
local keyed = #KEYS > 0
local n = keyed and #KEYS or (#ARGV - 1) / 2
for i = 1, n do
	local key = keyed and KEYS[i] or ARGV[2 * i]
	local owner = keyed and ARGV[i + 1] or ARGV[2 * i + 1]
	local held = redis.pcall('hexists', key, owner)
	if held == 1 then
		redis.call('pexpire', key, ARGV[1])
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
