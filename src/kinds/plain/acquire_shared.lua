-- Take a shared hold on a lock for an owner, as Redisson's read lock
-- (getReadWriteLock().readLock()) does, or say how long it stays busy.
--
-- KEYS[1]  the lock (a hash: "mode", and owner -> hold count)
-- ARGV[1]  lease in ms
-- ARGV[2]  the owner's reader field ("<uuid>:<n + 1>", see plain.c)
-- ARGV[3]  hold count to leave
-- ARGV[4]  the same session's exclusive field ("<uuid>:<n>"): a session
--          that holds the lock exclusively may take it shared as well
--
-- The data is the read lock's: "mode" = "read" (left "write" while the
-- session holds it exclusively too), the reader field with its count,
-- and a timeout key {KEYS[1]}:<field>:rwlock_timeout:1 (KEYS[1]:... when
-- the name has a brace) that lives as long as the holds' lease.  Redisson
-- makes one such key per hold; one is enough for its scripts, which
-- count a reader live while any of its keys 1..count has time left, and
-- it keeps rlock's work per hold bounded.  The key is the lock's slot and
-- no declared key, as in Redisson's scripts.  The hash's own lease is
-- never shortened: it is the longest of its holders'.
--
-- Returns what acquire.lua returns: {1, 0, 0} taken; {2, 0, 0} taken
-- although the owner expected to hold it already; {0, pttl, blocker}
-- held by a writer ({3, ...} when the owner expected to hold it), blocker
-- being 1 for a Redisson write lock (its releases publish on
-- redisson_rwlock:{key}), 0 for an exclusive rlock, an RLock or a fair
-- lock.
local name = KEYS[1]
local timeout
if string.find(name, '{', 1, true) then
	timeout = name .. ':' .. ARGV[2] .. ':rwlock_timeout:1'
else
	timeout = '{' .. name .. '}:' .. ARGV[2] .. ':rwlock_timeout:1'
end
local lease = tonumber(ARGV[1])
local target = tonumber(ARGV[3])
local mode = redis.call('hget', name, 'mode')
local held = redis.call('hexists', name, ARGV[2]) == 1
local free = redis.call('exists', name) == 0
if free or mode == 'read' or
	(mode == 'write' and redis.call('hexists', name, ARGV[4]) == 1) then
	redis.call('hset', name, 'mode', mode or 'read', ARGV[2], target)
	redis.call('set', timeout, 1, 'px', lease)
	if redis.call('pttl', name) < lease then
		redis.call('pexpire', name, lease)
	end
	if target > 1 and not held then
		return {2, 0, 0}
	end
	return {1, 0, 0}
end
local blocker = 0
if mode == 'write' then
	for _, field in ipairs(redis.call('hkeys', name)) do
		if string.sub(field, -6) == ':write' then
			blocker = 1
			break
		end
	end
end
if target > 1 then
	return {3, redis.call('pttl', name), blocker}
end
return {0, redis.call('pttl', name), blocker}
