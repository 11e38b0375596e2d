-- The latch's renewals and checks, in ../batch.lua's layout: a wait
-- holds nothing that could be lost, so every one is held.
--@include ../batch.lua
return rlock_batch(function(key, owner)
	return 1
end, function(key, owner)
end)
