-- The ticket kind's renewals, in ../../../src/kinds/batch.lua's layout.
--@include ../../../src/kinds/batch.lua
return rlock_batch(function(key, owner)
	local v = redis.pcall('get', key)
	if type(v) == 'table' then
		return v
	end
	return (v and string.sub(v, 1, #owner + 1) == owner .. ' ') and 1 or 0
end, function(key)
	redis.call('pexpire', key, ARGV[1])
end)
