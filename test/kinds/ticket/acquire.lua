-- The ticket kind's acquire: the string at the key is "<owner> <amount>".
--
-- KEYS[1]  the lock
-- ARGV[1]  lease in ms
-- ARGV[2]  owner
-- ARGV[3]  amount to leave
-- ARGV[4]  the amount the owner held before (above 0: a re-entry)
--
-- Returns {status, value}: 1 granted, 2 granted but the owner's earlier
-- holds were gone, 0 busy, 3 busy and the earlier holds gone; value is
-- the lease left of a busy lock, else 0 (no fencing token).
local v = redis.call('get', KEYS[1])
local reentry = tonumber(ARGV[4]) > 0
if v and string.sub(v, 1, #ARGV[2] + 1) ~= ARGV[2] .. ' ' then
	return {reentry and 3 or 0, redis.call('pttl', KEYS[1])}
end
redis.call('set', KEYS[1], ARGV[2] .. ' ' .. ARGV[3], 'px', ARGV[1])
return {(reentry and not v) and 2 or 1, 0}
