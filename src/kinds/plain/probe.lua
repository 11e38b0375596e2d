-- How a lock stands, for rlock_is_locked() and rlock_ttl(): the lease
-- left in ms (-1: no expiry) of a key shaped like a lock, -2 for
-- anything else (no key, a key of another type, a hash of other data).
-- Those functions are everybody's: they must not tell whether, or how
-- long, any other key of the database exists.
--
-- KEYS[1]  the lock
--@include ../shape.lua
if not rlock_is_lock(KEYS[1]) then
	return -2
end
return redis.call('pttl', KEYS[1])
