-- Take several Redisson RLocks for one owner at once: all of them, or none.
--
-- KEYS     the locks, in the order of the set (kinds/plain/multi.c); in a
--          Redis Cluster all of one slot
-- ARGV[1]  lease in ms
-- ARGV[2]  owner ("<uuid>:<n>")
--
-- Returns 0 when every lock was free, or the owner's already (an earlier
-- sending of this command whose answer was lost took it), and now holds
-- the owner once, with the lease and "mode" = "write" as acquire.lua
-- leaves it; else i, the first lock in that order someone else holds,
-- and nothing was written.  The owner holds none of them before (the
-- worker sends this only for keys whose hold count is 0), so there is no
-- re-entry, no fencing token and no yield mark to mind: a set that finds
-- a lock busy is taken on one by one, with acquire.lua.
--
-- Every read comes before the first write, and the reads raise WRONGTYPE
-- for a key that is no hash: no lock of the set is taken unless all are.
for i = 1, #KEYS do
	if redis.call('hexists', KEYS[i], ARGV[2]) == 0 and
		redis.call('exists', KEYS[i]) == 1 then
		return i
	end
end
for i = 1, #KEYS do
	redis.call('hset', KEYS[i], ARGV[2], 1, 'mode', 'write')
	redis.call('pexpire', KEYS[i], ARGV[1])
end
return 0
