-- Telling a lock's waiters, for the scripts that publish (release.lua,
-- force.lua): where the channel and the publish commands are is what
-- kinds.c's rlock_kind_channel() and rlock_kind_publish() chose.
--
-- rlock_publish(k, at, message) publishes message on the channel that is
-- KEYS[k] where channels are keys (outside a Redis Cluster); ARGV[at] is
-- the publish command (PUBLISH or SPUBLISH).  In a Redis Cluster the
-- channel is ARGV[at + 1] (a channel is no key: declared, it makes a
-- migrating slot answer TRYAGAIN) and ARGV[at + 2] a second publish
-- command, or none, when messages go both ways; there a publish that
-- fails does not fail the script: the lock is freed whatever becomes of
-- the message.  Returns how many subscribers the message reached, as
-- the publish commands count them (those of this node).
--
-- rlock_free(k, at, rw) deletes the lock KEYS[1] and publishes "0" on
-- its channel (KEYS[k] where channels are keys), as Redisson's unlock
-- does: that wakes Redisson's waiters and rlock's alike.  It then tells
-- the rest of the family that may wait for the name (rlock_tell_family):
-- rw on redisson_rwlock:{name}, where the waiters of a Redisson
-- read-write lock listen: "1" (rw nil) after an exclusive hold, as
-- Redisson's write unlock (every thread waiting then tries: readers may
-- all enter), "0" after the last shared one, as Redisson's read unlock
-- (one thread of each client tries, and a thread that failed its try
-- but is not yet asleep keeps that wake-up: "1" wakes only the threads
-- asleep, and such a writer would sleep for the lease it saw); and "0"
-- on the channel of the first owner queued for a
-- Redisson fair lock of the name (redisson_lock_queue:{name}) whose
-- deadline has not passed, as a fair unlock tells its queue's head once
-- the owners gone are dropped (this one drops nothing, and looks at the
-- first 64 owners at most).  Those channels and the queue are
-- no declared keys (the slot is the lock's; Redisson's own scripts name
-- other readers' keys so), and a command the user may not run (TIME too,
-- which an ACL from before the fair kind lacks) costs only that message.
-- Returns how many subscribers the messages reached.
--
-- Included on one line (see embed-lua): no comment after code here.
local function rlock_publish(k, at, message)
	if KEYS[k] then
		return redis.call(ARGV[at], KEYS[k], message)
	end
	local heard = redis.pcall(ARGV[at], ARGV[at + 1], message)
	if type(heard) ~= 'number' then
		heard = 0
	end
	if ARGV[at + 2] then
		local more = redis.pcall(ARGV[at + 2], ARGV[at + 1], message)
		if type(more) == 'number' then
			heard = heard + more
		end
	end
	return heard
end
local function rlock_derived(prefix, name)
	if string.find(name, '{', 1, true) then
		return prefix .. name
	end
	return prefix .. '{' .. name .. '}'
end
local function rlock_publish_to(at, channel, message)
	local heard = 0
	for _, command in ipairs({ARGV[at], ARGV[at + 2]}) do
		local n = redis.pcall(command, channel, message)
		if type(n) == 'number' then
			heard = heard + n
		end
	end
	return heard
end
local function rlock_tell_family(at, rw)
	local heard = rlock_publish_to(at,
		rlock_derived('redisson_rwlock:', KEYS[1]), rw or '1')
	local heads = redis.pcall('lrange',
		rlock_derived('redisson_lock_queue:', KEYS[1]), 0, 63)
	if type(heads) ~= 'table' or #heads == 0 then
		return heard
	end
	local deadlines = rlock_derived('redisson_lock_timeout:', KEYS[1])
	local t = redis.pcall('time')
	if type(t) ~= 'table' or not t[1] then
		return heard
	end
	local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
	for _, owner in ipairs(heads) do
		local deadline = tonumber(redis.pcall('zscore', deadlines, owner))
		if deadline and deadline > now then
			return heard + rlock_publish_to(at,
				rlock_derived('redisson_lock__channel:', KEYS[1]) .. ':' .. owner,
				'0')
		end
	end
	return heard
end
local function rlock_free(k, at, rw)
	redis.call('del', KEYS[1])
	return rlock_publish(k, at, '0') + rlock_tell_family(at, rw)
end
