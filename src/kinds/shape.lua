-- Is "key" shaped like a lock of Redisson's family: a hash whose fields
-- are its owners ("<id>:<n>", a write lock's "<id>:<n>:write") with
-- their hold counts, and maybe "mode"?  The scripts that read or remove
-- a key any caller names include this (src/kinds/embed-lua writes it on
-- the line of the include, so that the lines of the script stay theirs):
-- a key of other data is left alone, and tells nothing about itself.  A
-- hash of more fields than a lock has owners is not looked through.
local function rlock_is_lock(key)
	if redis.call('type', key)['ok'] ~= 'hash' or
		redis.call('hlen', key) > 1024 then
		return false
	end
	local fields = redis.call('hgetall', key)
	local owners = 0
	for i = 1, #fields, 2 do
		local f, v = fields[i], fields[i + 1]
		if f == 'mode' then
			if v ~= 'read' and v ~= 'write' then
				return false
			end
		elseif (string.match(f, '^.+:%d+$') or
				string.match(f, '^.+:%d+:write$')) and
			string.match(v, '^%d+$') then
			owners = owners + 1
		else
			return false
		end
	end
	return owners > 0
end
