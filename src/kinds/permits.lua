-- What the semaphore's scripts (semaphore/) share: Redisson's permit-expirable
-- semaphore, an available count in the string KEYS[1] and the permits
-- held in the sorted set KEYS[2] ({NAME}:timeout), scored by the end of
-- their lease in ms.  An owner's permits are the members "<owner>:1" to
-- "<owner>:<n>", all with one lease.
--
-- rlock_now() is Redis's clock in ms (TIME: every rlock instance and
-- every script call agrees on it).  rlock_owned(timeout, owner) counts
-- the owner's permits, 1 up until one is missing (at most 1024, the
-- bound a session's permits on one semaphore have).  rlock_reclaim(now)
-- returns to the pool the permits whose lease ended (at most 1024 a
-- call), as Redisson's scripts do when they touch the semaphore, and
-- returns how many it took back; it counts them back first, so that a
-- count Redis refuses (not an integer) fails it before it removes
-- anything.  rlock_timeout_of(name) is the sorted set of a semaphore's
-- name (Redisson's suffixName).  rlock_exact(value) is a count read from
-- Redis as a Lua number, nil when it is no integer or one Lua's numbers
-- (doubles) do not hold exactly (2^53 and beyond): such a number would
-- be rounded, written back rounded and answered as another.
--
-- rlock_counted(timeout, owner) is rlock_owned in a few commands (at
-- most 21), for the watchdog's batches, which may renew many owners: a
-- search over members that go from 1 up without a gap, which they do
-- while the owner holds them (they share one lease, so they end
-- together).  rlock_lease(timeout, owner, first, last, deadline, flags)
-- scores the owner's members first to last with deadline, 256 to a ZADD,
-- the flags (XX, GT) given to every ZADD.
--
-- Included on one line (see embed-lua): no comment after code here.
local function rlock_now()
	local t = redis.call('time')
	return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function rlock_owned(timeout, owner)
	local n = 0
	while n < 1024 and redis.call('zscore', timeout, owner .. ':' .. (n + 1)) do
		n = n + 1
	end
	return n
end
local function rlock_counted(timeout, owner)
	if not redis.call('zscore', timeout, owner .. ':1') then
		return 0
	end
	local lo, hi = 1, 2
	while hi <= 1024 and redis.call('zscore', timeout, owner .. ':' .. hi) do
		lo, hi = hi, hi * 2
	end
	hi = math.min(hi, 1025)
	while hi - lo > 1 do
		local mid = math.floor((lo + hi) / 2)
		if redis.call('zscore', timeout, owner .. ':' .. mid) then
			lo = mid
		else
			hi = mid
		end
	end
	return lo
end
local function rlock_lease(timeout, owner, first, last, deadline, ...)
	for i = first, last, 256 do
		local args = {...}
		for j = i, math.min(i + 255, last) do
			args[#args + 1] = deadline
			args[#args + 1] = owner .. ':' .. j
		end
		redis.call('zadd', timeout, unpack(args))
	end
end
local function rlock_reclaim(now)
	local gone = redis.call('zrangebyscore', KEYS[2], 0, now, 'limit', 0, 1024)
	if #gone == 0 then
		return 0
	end
	redis.call('incrby', KEYS[1], #gone)
	for i = 1, #gone, 256 do
		redis.call('zrem', KEYS[2], unpack(gone, i, math.min(i + 255, #gone)))
	end
	return #gone
end
local function rlock_timeout_of(name)
	if string.find(name, '{', 1, true) then
		return name .. ':timeout'
	end
	return '{' .. name .. '}:timeout'
end
local function rlock_exact(value)
	local n = tonumber(value or '0')
	if n and n == math.floor(n) and math.abs(n) < 9007199254740992 then
		return n
	end
	return nil
end
