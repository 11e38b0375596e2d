-- The ticket kind's probe: the lease left of a string key, -2 otherwise.
if redis.call('type', KEYS[1]).ok ~= 'string' then
	return -2
end
return redis.call('pttl', KEYS[1])
