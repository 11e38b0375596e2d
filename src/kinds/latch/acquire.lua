-- The latch's wait, as an acquire: granted when the count at KEYS[1] is
-- zero or the latch does not exist (Redisson's count-down latch deletes
-- its key when the count reaches zero).  Nothing is written: the worker
-- gives the "hold" back at once.
--
-- KEYS[1]  the latch (NAME: a string, the count)
--
-- Returns {1, 0} at zero, else {0, -1} (wait for the message "0" on
-- redisson_countdownlatch__channel__{NAME}).  A name that is not a
-- string (another kind) fails with WRONGTYPE.
local count = tonumber(redis.call('get', KEYS[1]) or '0')
if count <= 0 then
	return {1, 0}
end
return {0, -1}
