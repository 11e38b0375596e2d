-- Leave a lock just freed to other clients for a moment: rlock's
-- acquires, of any instance, answer busy while the mark lasts
-- (acquire.lua), and Redisson's, which do not read it, may take the lock.
--
-- ARGV[1]  the lock's yield mark (rlock_yield:{key}), not declared, so
--          that a user whose ACL does not name it gets no error: the
--          pause is lost, nothing else (pcall)
-- ARGV[2]  how long, in ms
--
-- Returns 1 if the mark was set, 0 if not.
local set = redis.pcall('set', ARGV[1], '1', 'PX', ARGV[2])
if type(set) == 'table' and set.ok then
	return 1
end
return 0
