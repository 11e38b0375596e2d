-- The latch's calls (latch.h's LATCH_CALL_*), as Redisson's count-down
-- latch makes them.
--
-- KEYS[1]  the latch (NAME: a string, the count)
-- KEYS[2]  its channel, redisson_countdownlatch__channel__{NAME} (not in
--          a Redis Cluster)
-- ARGV[1]  which call: 1 set the count if not set (trySetCount: 1 if set,
--          0 if it was; publishes "1"), 2 count down (the count left;
--          at zero the key goes and "0" is published, which wakes every
--          waiter), 3 the count, 4 delete (1 if there was one; publishes
--          "1")
-- ARGV[2]  the call's number
-- ARGV[3]  the publish command, and after it what ../publish.lua says
--
-- A name that is not a string (another kind) fails with WRONGTYPE, and
-- counting down or reading a count that is no integer Lua's numbers
-- hold exactly (below 2^53 in magnitude) fails too, changing nothing:
-- it would be answered rounded, or as -2^63.
--@include ../publish.lua
local which = tonumber(ARGV[1])
local count = redis.call('get', KEYS[1])
if count and which ~= 1 and which ~= 4 then
	local n = tonumber(count)
	if not n or n ~= math.floor(n) or math.abs(n) >= 9007199254740992 then
		return redis.error_reply('ERR the latch\'s count is not an integer below 2^53 in magnitude, which rlock cannot count with')
	end
end
if which == 1 then
	if count then
		return 0
	end
	redis.call('set', KEYS[1], ARGV[2])
	rlock_publish(2, 3, '1')
	return 1
end
if which == 2 then
	if not count then
		return 0
	end
	local left = redis.call('decr', KEYS[1])
	if left <= 0 then
		redis.call('del', KEYS[1])
	end
	if left == 0 then
		rlock_publish(2, 3, '0')
	end
	return math.max(left, 0)
end
if which == 3 then
	return math.max(tonumber(count or '0'), 0)
end
if not count then
	return 0
end
redis.call('del', KEYS[1])
rlock_publish(2, 3, '1')
return 1
