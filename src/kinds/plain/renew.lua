-- Renew the leases of a batch of locks (the watchdog).
--
-- KEYS[i]      a lock
-- ARGV[1]      lease in ms
-- ARGV[i + 1]  the owner of KEYS[i]
--
-- Resets the lease of every lock its owner still holds, and never brings
-- back one it does not.  Returns one 1 (renewed) or 0 (not held: stop
-- renewing) per key.  A key of another type counts as not held rather
-- than failing the whole batch.
local result = {}
for i = 1, #KEYS do
	local held = redis.pcall('hexists', KEYS[i], ARGV[i + 1])
	if held == 1 then
		redis.call('pexpire', KEYS[i], ARGV[1])
		result[i] = 1
	else
		result[i] = 0
	end
end
return result
