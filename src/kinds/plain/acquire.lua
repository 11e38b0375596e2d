-- Take a Redisson RLock for an owner, or say how long it stays busy.
--
-- KEYS[1]  the lock (a hash: owner -> hold count, with a PEXPIRE lease)
-- KEYS[2]  its fencing token counter, when the caller asks for a token
-- ARGV[1]  lease in ms
-- ARGV[2]  owner ("<uuid>:<n>")
-- ARGV[3]  hold count to leave (the worker knows it: see kinds/README.md)
--
-- Returns {1, token} when taken; {2, token} when taken although the owner
-- expected to hold it already and did not (its earlier holds were lost);
-- {0, pttl} when someone else holds it, pttl being the lease left in ms
-- (-1: no expiry), which bounds how long a waiter sleeps; {3, pttl} when
-- someone else holds it although the owner expected to hold it already.
--
-- The token is counted first: Redis does not undo a script's writes when
-- a later command fails, and a counter that cannot be incremented must
-- not leave a lock behind.  After that first write nothing can fail (the
-- reads before it raise WRONGTYPE, and Redis refuses a script for lack of
-- memory only at its first write).
local held = redis.call('hexists', KEYS[1], ARGV[2]) == 1
local reentry = tonumber(ARGV[3]) > 1
if held or redis.call('exists', KEYS[1]) == 0 then
	local token = 0
	if #KEYS > 1 then
		token = redis.call('incr', KEYS[2])
	end
	redis.call('hset', KEYS[1], ARGV[2], ARGV[3])
	redis.call('pexpire', KEYS[1], ARGV[1])
	if reentry and not held then
		return {2, token}
	end
	return {1, token}
end
if reentry then
	return {3, redis.call('pttl', KEYS[1])}
end
return {0, redis.call('pttl', KEYS[1])}
