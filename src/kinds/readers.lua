-- How long the readers of a lock still hold it, for the scripts that give
-- holds back (plain/release_shared.lua, and plain/release.lua when an
-- exclusive hold leaves the same session's shared one).
--
-- rlock_readers_left(name) is the longest time to live, in ms, of the
-- timeout keys of the readers of lock "name" (every field but "mode"),
-- 0 when none has time left: Redisson's read release rule, a reader
-- being live while one of its keys 1..count has time left.  A count
-- above 1024 is looked through up to there (Redisson makes one key per
-- hold: no reader of its holds that many at once).  The keys are in the
-- lock's slot and no declared keys, as in Redisson's scripts.
--
-- Included on one line (see embed-lua): no comment after code here.
local function rlock_readers_left(name)
	local base = name
	if not string.find(name, '{', 1, true) then
		base = '{' .. name .. '}'
	end
	local longest = 0
	for _, field in ipairs(redis.call('hkeys', name)) do
		if field ~= 'mode' then
			local n = tonumber(redis.call('hget', name, field)) or 0
			for i = 1, math.min(n, 1024) do
				local left = redis.call('pttl', base .. ':' .. field ..
					':rwlock_timeout:' .. i)
				if left > longest then
					longest = left
				end
			end
		end
	end
	return longest
end
