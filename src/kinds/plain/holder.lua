-- Who holds a Redisson RLock, as far as Redis can tell.
--
-- KEYS[1]  the lock
--
-- Returns {} when the lock is free; else {owner, count, name, pid, pttl,
-- owners}: the hash field of its (first) owner and that owner's count;
-- when the owner's "<uuid>:<n>" names an rlock instance that registered
-- itself (rlock_instance:{<uuid>}, see src/worker/registry.c), that
-- instance's name and the pid of session n (or n - 1, whose shared holds
-- are field n), else false; the lease left in
-- ms; how many owners the hash has (1 for a lock held as Redisson holds
-- it).  The "mode" field is not an owner (see acquire.lua).  A key that
-- is not shaped like a lock reads as a free lock.  The registry is read
-- whatever its type: anything but a hash reads as no registry.
--@include ../shape.lua
if not rlock_is_lock(KEYS[1]) then
	return {}
end
local fields = redis.call('hgetall', KEYS[1])
local owner, count, owners = nil, nil, 0
for i = 1, #fields, 2 do
	if fields[i] ~= 'mode' then
		owners = owners + 1
		if owner == nil then
			owner, count = fields[i], fields[i + 1]
		end
	end
end
if owner == nil then
	return {}
end
local name, pid = false, false
local uuid, n = string.match(owner, '^(.+):(%d+)$')
if uuid then
	-- a session's shared holds are the field of its number plus one
	local reg = redis.pcall('hmget', 'rlock_instance:{' .. uuid .. '}',
		'name', n, tostring(tonumber(n) - 1))
	if type(reg) == 'table' and reg.err == nil then
		name, pid = reg[1], reg[2] or reg[3]
	end
end
return {owner, count, name, pid, redis.call('pttl', KEYS[1]), owners}
