-- The loop of a kind's batch scripts (renew.lua, verify.lua): one answer
-- per lock of the batch kinds.c's rlock_kind_batch() builds.
--
-- KEYS[i]      a lock
-- ARGV[1]      the batch's ms (a lease, a margin: the script's to read)
-- ARGV[i + 1]  the owner of KEYS[i]
--
-- In a Redis Cluster the locks of one primary go in one call, over many
-- slots, so they are no declared keys: KEYS is empty, and ARGV[2i] is a
-- lock, ARGV[2i + 1] its owner.
--
-- rlock_batch(held, keep) asks held(key, owner) whether the owner holds
-- the lock (it returns the reply of a redis.pcall: 1 when it does), and
-- runs keep(key, owner) for each lock held.  Returns one 1 (held) or 0
-- (not held) per lock; in a cluster, 2 for a lock this node cannot answer
-- for (its slot moved, the cluster is down: neither lost nor kept, asked
-- again with the key declared).  A key of another type counts as not
-- held rather than failing the whole batch.
--
-- rlock_reader(key, owner) is the timeout key of a shared hold when the
-- owner is a reader field (an even number: plain.c's owner numbers), else
-- nil; rlock_held(key, owner) is held() for the plain kind: the field is
-- there and, for a reader, its timeout key too (a reader without one is
-- gone to Redisson's read unlock).  The timeout key is read under pcall:
-- while a slot migrates, the hash and its timeout key may be on two
-- nodes, and Redis refuses a script that reads the one it no longer has;
-- that hold is then one this node cannot answer for, not a refusal of
-- the whole batch (the other locks of the primary would go unrenewed).
--
-- Included on one line (see embed-lua): no comment after code here.
local function rlock_batch(held, keep)
	local result = {}
	local keyed = #KEYS > 0
	local n = keyed and #KEYS or (#ARGV - 1) / 2
	for i = 1, n do
		local key = keyed and KEYS[i] or ARGV[2 * i]
		local owner = keyed and ARGV[i + 1] or ARGV[2 * i + 1]
		local reply = held(key, owner)
		if reply == 1 then
			keep(key, owner)
			result[i] = 1
		elseif not keyed and type(reply) == 'table' and reply.err ~= nil and
			not string.find(reply.err, 'WRONGTYPE', 1, true) then
			result[i] = 2
		else
			result[i] = 0
		end
	end
	return result
end
local function rlock_reader(key, owner)
	local n = tonumber(string.match(owner, ':(%d+)$'))
	if n == nil or n % 2 == 1 then
		return nil
	end
	if string.find(key, '{', 1, true) then
		return key .. ':' .. owner .. ':rwlock_timeout:1'
	end
	return '{' .. key .. '}:' .. owner .. ':rwlock_timeout:1'
end
local function rlock_held(key, owner)
	local reply = redis.pcall('hexists', key, owner)
	local timeout = rlock_reader(key, owner)
	if reply == 1 and timeout then
		local left = redis.pcall('pttl', timeout)
		if type(left) ~= 'number' then
			return left
		end
		if left == -2 then
			return 0
		end
	end
	return reply
end
