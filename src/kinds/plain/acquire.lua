-- Take a Redisson RLock for an owner, or say how long it stays busy.
--
-- KEYS[1]  the lock (a hash: owner -> hold count, with a PEXPIRE lease,
--          and the field "mode" = "write")
-- KEYS[2]  its fencing token counter, when the caller asks for a token
-- ARGV[1]  lease in ms
-- ARGV[2]  owner ("<uuid>:<n>")
-- ARGV[3]  hold count to leave (the worker knows it: see kinds/README.md)
-- ARGV[4]  for a waiter's try, the lock's yield mark (rlock_yield:{key}),
--          else '': while the mark lasts, a free lock is left to other
--          clients (worker/waiters.c); not a declared key, and read under
--          pcall, so that a user whose ACL does not name it, or a slot on
--          the move, only loses the pause; a mark set for longer than
--          100 ms is none of the worker's (it sets 1 ms) and is ignored,
--          so that nobody can keep waiters off a free lock with one
-- ARGV[5]  optional: the worker's channel of marks (worker/track.c)
-- ARGV[6]  with it: this acquire's mark (a number and a random tag),
--          published there as it is when it grants
--
-- Returns {status, n, blocker}: {1, token, 0} when taken; {2, token, 0}
-- when taken although the owner expected to hold it already and did not
-- (its earlier holds were lost); {0, pttl, blocker} when someone else
-- holds it, pttl being the lease left in ms (-1: no expiry), which bounds
-- how long a waiter sleeps, or when it is free but yielded to other
-- clients for pttl ms more; {3, pttl, blocker} when someone else holds it
-- although the owner expected to hold it already.  blocker is 1 when the
-- holder is a Redisson read-write lock (getReadWriteLock: a read lock, or
-- a write lock, whose owners end in ":write"), whose releases publish on
-- redisson_rwlock:{key}, not on the lock's channel; else 0.
--
-- "mode" = "write" is what a Redisson write lock holds: with it, a
-- Redisson read or write lock (getReadWriteLock) taken on the same name
-- waits for ours, where its script would otherwise join any hash without
-- that field.  Redisson's RLock scripts never read it.
--
-- An owner whose session holds the lock shared (its reader field, the
-- owner's number plus one: acquire_shared.lua) and nobody else does
-- takes it exclusively as well, an upgrade: the hash becomes what a
-- session holding it exclusively and then shared holds ("mode" =
-- "write", both fields), and its lease is not shortened, nor by a
-- re-entry while the shared hold lasts (the reader's lease is the
-- hash's, and it may be the longer).  Readers whose leases ran out
-- count as gone, as in Redisson's read release, and their fields are
-- taken out.  With other readers it is busy, as
-- for anyone, with two differences for the wait: a mark,
-- rlock_upgrade:{key} (no declared key, set under pcall: an ACL that
-- does not name it costs the prompt wake-up only), that lasts 2 s and
-- asks the release leaving one reader to publish (release_shared.lua),
-- and a pttl of at most 1000 ms, so that the waiter tries again within a
-- second of a Redisson reader's release, which publishes nothing while a
-- reader remains.
--
-- The token is counted first: Redis does not undo a script's writes when
-- a later command fails, and a counter that cannot be incremented must
-- not leave a lock behind.  After that first write nothing can fail (the
-- reads before it raise WRONGTYPE, and Redis refuses a script for lack of
-- memory only at its first write).
local held = redis.call('hexists', KEYS[1], ARGV[2]) == 1
local reentry = tonumber(ARGV[3]) > 1
local free = not held and redis.call('exists', KEYS[1]) == 0
local blocker = 0
if not held and not free then
	local mode = redis.call('hget', KEYS[1], 'mode')
	if mode == 'read' then
		blocker = 1
	elseif mode == 'write' then
		for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
			if string.sub(field, -6) == ':write' then
				blocker = 1
				break
			end
		end
	end
end
local reading = false
local mine
if not held and not free and blocker == 1 and
	redis.call('hget', KEYS[1], 'mode') == 'read' then
	local base, n = string.match(ARGV[2], '^(.*:)(%d+)$')
	if n ~= nil then
		mine = base .. string.format('%d', tonumber(n) + 1)
		reading = redis.call('hexists', KEYS[1], mine) == 1
	end
end
-- the other readers, if any, must all be gone: a reader field none of
-- whose timeout keys has time left holds nothing any more (Redisson's
-- read release rule, ../readers.lua), only its session has not given it
-- back yet; such fields go with the grant.  A field that is no reader's
-- ("<uuid>:<n>") is a holder of unknown kind: busy.
local upgrade = false
local lapsed = {}
if reading then
	local tag = KEYS[1]
	if not string.find(tag, '{', 1, true) then
		tag = '{' .. tag .. '}'
	end
	upgrade = true
	for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
		if field ~= 'mode' and field ~= mine then
			local n = tonumber(redis.call('hget', KEYS[1], field))
			local live = n == nil or not string.find(field, '^.+:%d+$')
			for i = 1, math.min(n or 0, 1024) do
				if live then
					break
				end
				live = redis.call('pttl', tag .. ':' .. field ..
					':rwlock_timeout:' .. i) > 0
			end
			if live then
				upgrade = false
				break
			end
			lapsed[#lapsed + 1] = field
		end
	end
end
if free and not reentry and ARGV[4] ~= '' then
	local yielded = redis.pcall('pttl', ARGV[4])
	if type(yielded) == 'number' and yielded > 0 and yielded <= 100 then
		return {0, yielded, 0}
	end
end
if held or free or upgrade then
	local token = 0
	-- whether the lease may only grow (the session's reader is there) is
	-- read before any write: a read between two writes would track the
	-- key again, and the second write would announce a change of our own
	-- after the mark below (client-side tracking, worker/track.c)
	local grow_only = upgrade or (held and redis.call('hlen', KEYS[1]) > 2)
	local set_lease = not grow_only or
		redis.call('pttl', KEYS[1]) < tonumber(ARGV[1])
	if #KEYS > 1 then
		token = redis.call('incr', KEYS[2])
	end
	if #lapsed > 0 then
		redis.call('hdel', KEYS[1], unpack(lapsed))
	end
	redis.call('hset', KEYS[1], ARGV[2], ARGV[3], 'mode', 'write')
	if set_lease then
		redis.call('pexpire', KEYS[1], ARGV[1])
	end
	-- our own write untracked the key: a read tracks it again, so that
	-- any later change is announced (client-side tracking), and the mark
	-- tells the worker where in the announcements that read was; a
	-- channel the user may not publish on costs the mark, not the lock
	redis.call('pttl', KEYS[1])
	if ARGV[6] then
		redis.pcall('publish', ARGV[5], ARGV[6])
	end
	if reentry and not held then
		return {2, token, 0}
	end
	return {1, token, 0}
end
local pttl = redis.call('pttl', KEYS[1])
if reading then
	-- an upgrade that other readers keep waiting: its mark asks the
	-- release that leaves one reader to say so (release_shared.lua); a
	-- Redisson reader's release says nothing, so it tries again within
	-- a second whatever lease the lock has left
	local mark = 'rlock_upgrade:' .. KEYS[1]
	if not string.find(KEYS[1], '{', 1, true) then
		mark = 'rlock_upgrade:{' .. KEYS[1] .. '}'
	end
	redis.pcall('set', mark, '1', 'px', 2000)
	if pttl < 0 or pttl > 1000 then
		pttl = 1000
	end
end
if reentry then
	return {3, pttl, blocker}
end
return {0, pttl, blocker}
