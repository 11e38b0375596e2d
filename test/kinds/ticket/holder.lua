-- Who holds a ticket: {} when free, else {owner, amount, lease left}.
if redis.call('type', KEYS[1]).ok ~= 'string' then
	return {}
end
local v = redis.call('get', KEYS[1])
local owner, amount = string.match(v, '^(%S+) (%d+)$')
return {owner or '', amount or '0', redis.call('pttl', KEYS[1])}
