-- Hand a Redisson RLock from one owner of this instance to the next in
-- one step: the key is never free, so no other client can take it in
-- between and no unlock message is needed (worker/transfer.c).
--
-- KEYS[1]  the lock
-- KEYS[2]  its unlock channel, only counted (the worker never hands a lock
--          on this way in a Redis Cluster, where a channel is no key)
-- ARGV[1]  lease in ms for the owner taking it
-- ARGV[2]  the owner giving it ("<uuid>:<n>")
-- ARGV[3]  the owner taking it
-- ARGV[4]  the hold count the taker is left with
-- ARGV[5]  optional: the worker's channel of marks (worker/track.c)
-- ARGV[6]  with it: the taker's mark, published as acquire.lua does
--
-- Returns {1, n} when the lock changed hands, n being how many clients
-- listen on its unlock channel (-1 when Redis would not say: a user
-- without PUBSUB), so that the worker knows whether anyone else waits;
-- {0, 0} when the giver held nothing any more (its lease ran out, or
-- someone removed the lock): then nothing was written, and the taker's
-- grant is void.  The giver's field is the lock's only owner field (its
-- acquire took a free key, or refused the key of a read-write lock), so
-- the key is written anew: DEL and HSET, commands a release and an
-- acquire use already (a user's ACL that lets rlock lock lets it
-- transfer).
--
-- The first read tracks the key (client-side tracking), the writes then
-- untrack it, and the read after them tracks it again for the taker
-- before the mark goes out, as in acquire.lua.  Nothing can fail after
-- the first write (Redis refuses a script for lack of memory only there).
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
	return {0, 0}
end
redis.call('del', KEYS[1])
redis.call('hset', KEYS[1], ARGV[3], ARGV[4], 'mode', 'write')
redis.call('pexpire', KEYS[1], ARGV[1])
redis.call('pttl', KEYS[1])
if ARGV[6] then
	redis.pcall('publish', ARGV[5], ARGV[6])
end
local listening = redis.pcall('pubsub', 'numsub', KEYS[2])
if type(listening) == 'table' and type(listening[2]) == 'number' then
	return {1, listening[2]}
end
return {1, -1}
