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
-- rlock_free(at) deletes the lock KEYS[1] and publishes "0" on its
-- channel (KEYS[2] where channels are keys), as Redisson's unlock does:
-- that wakes Redisson's waiters and rlock's alike.  Returns how many
-- subscribers the message reached.
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
local function rlock_free(at)
	redis.call('del', KEYS[1])
	return rlock_publish(2, at, '0')
end
