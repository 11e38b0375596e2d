-- The wait-for graph of every instance sharing this Redis, for deadlocks
-- across instances (worker/wfg.c): write this instance's part, and look
-- for a cycle through each of its sessions that wait for a lock.
--
-- KEYS[1]  nodes: session -> its wait (msgpack: expires, written,
--          description, {key, mode}..., {session}...)
-- KEYS[2]  holds: lock key -> {instance -> {expires, written,
--          {session, mode}...}} (msgpack): who holds a key someone waits for
-- KEYS[3]  suspects: session -> {cycle, since, expires} (msgpack)
-- KEYS[4]  this instance's index: the fields it wrote last time
--          (msgpack: {sessions}, {keys})
-- ARGV[1]  this instance's uuid
-- ARGV[2]  how long an entry lives, in ms (the worker rewrites it sooner)
-- ARGV[3]  the most sessions a search visits
-- ARGV[4]  how many nodes follow, each: session, description, k, then k
--          pairs (key, mode "x" or "s"), d, then d sessions it waits for
--          (a PostgreSQL lock wait); then how many holds, each: key, c,
--          c pairs (session, mode); then how many sessions to check, and
--          those sessions.
--
-- A session is "<uuid>:<n>"; every key and name is binary-safe.  Times
-- are Redis's (TIME): no host clock is compared with another.
--
-- Returns {keys waited for by live entries (at most 1000), victims}: a
-- victim is {session, description...} along its cycle, from itself.  A
-- cycle is found once, noted as the checking session's suspect, and acted
-- on only when found again with every entry on it written since: the
-- entries of sessions that stopped waiting are gone or old by then.  A
-- session on a cycle another session suspects waits for that one's
-- verdict, so a cycle has one victim.  A cycle of this instance's sessions
-- alone is left to the instance (backend/deadlock.c).
local t = redis.call('time')

-- Entries are read back with these: one that is not msgpack or not of the
-- shape an instance writes (another client wrote it) is treated as
-- absent and deleted, so that it cannot stop every instance's search
local function list_of_strings(l, width)
	if type(l) ~= 'table' then
		return false
	end
	for _, x in ipairs(l) do
		if width == 0 then
			if type(x) ~= 'string' then
				return false
			end
		elseif type(x) ~= 'table' or type(x[1]) ~= 'string' or
			type(x[2]) ~= 'string' then
			return false
		end
	end
	return true
end
local function decode(packed, valid)
	local ok, v = pcall(cmsgpack.unpack, packed)
	if ok and type(v) == 'table' and valid(v) then
		return v
	end
	return nil
end
local function valid_node(v)
	return type(v[1]) == 'number' and type(v[2]) == 'number' and
		type(v[3]) == 'string' and list_of_strings(v[4], 2) and
		list_of_strings(v[5], 0)
end
local function valid_holds(v)
	for _, part in pairs(v) do
		if type(part) ~= 'table' or type(part[1]) ~= 'number' or
			type(part[2]) ~= 'number' or not list_of_strings(part[3], 2) then
			return false
		end
	end
	return true
end
local function valid_suspect(v)
	return type(v[1]) == 'string' and type(v[2]) == 'number' and
		type(v[3]) == 'number'
end
local function valid_index(v)
	return list_of_strings(v[1], 0) and list_of_strings(v[2], 0)
end

local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local uuid = ARGV[1]
local ttl = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])

-- this instance's entries of last time go; the new ones replace them
local index = redis.call('get', KEYS[4])
index = index and decode(index, valid_index)
if index then
	for _, node in ipairs(index[1]) do
		redis.call('hdel', KEYS[1], node)
	end
	for _, key in ipairs(index[2]) do
		local packed = redis.call('hget', KEYS[2], key)
		local parts = packed and decode(packed, valid_holds)
		if packed then
			if parts then
				parts[uuid] = nil
			end
			if not parts or next(parts) == nil then
				redis.call('hdel', KEYS[2], key)
			else
				redis.call('hset', KEYS[2], key, cmsgpack.pack(parts))
			end
		end
	end
end
local written_nodes, written_keys = {}, {}

local i = 4
local function arg()
	i = i + 1
	return ARGV[i - 1]
end

for _ = 1, tonumber(arg()) do
	local node, desc = arg(), arg()
	local keys, direct = {}, {}
	for k = 1, tonumber(arg()) do
		keys[k] = {arg(), arg()}
	end
	for d = 1, tonumber(arg()) do
		direct[d] = arg()
	end
	redis.call('hset', KEYS[1], node,
		cmsgpack.pack({now + ttl, now, desc, keys, direct}))
	written_nodes[#written_nodes + 1] = node
end
for _ = 1, tonumber(arg()) do
	local key = arg()
	local holders = {}
	for h = 1, tonumber(arg()) do
		holders[h] = {arg(), arg()}
	end
	local packed = redis.call('hget', KEYS[2], key)
	local parts = packed and decode(packed, valid_holds) or {}
	parts[uuid] = {now + ttl, now, holders}
	redis.call('hset', KEYS[2], key, cmsgpack.pack(parts))
	written_keys[#written_keys + 1] = key
end
local check = {}
for c = 1, tonumber(arg()) do
	check[c] = arg()
end

-- every live entry, read once; expired ones (of instances that stopped
-- writing) go, and the keys live ones wait for are listed, for their
-- holders to say who they are
local entries, waited, nwaited, seen_keys = {}, {}, 0, {}
local all = redis.call('hgetall', KEYS[1])
for f = 1, #all, 2 do
	local v = decode(all[f + 1], valid_node)
	if not v or v[1] <= now then
		redis.call('hdel', KEYS[1], all[f])
	else
		entries[all[f]] = v
		for _, km in ipairs(v[4]) do
			if not seen_keys[km[1]] and nwaited < 1000 then
				seen_keys[km[1]] = true
				nwaited = nwaited + 1
				waited[nwaited] = km[1]
			end
		end
	end
end
local function entry(node)
	return entries[node] or false
end
local holds = {}
local function holders_of(key)
	local h = holds[key]
	if h == nil then
		local packed = redis.call('hget', KEYS[2], key)
		h = {}
		local parts = packed and decode(packed, valid_holds)
		if packed and not parts then
			redis.call('hdel', KEYS[2], key)
		elseif parts then
			for _, part in pairs(parts) do
				if part[1] > now then
					for _, who in ipairs(part[3]) do
						h[#h + 1] = {who[1], who[2], part[2]}
					end
				end
			end
		end
		holds[key] = h
	end
	return h
end

-- the sessions "node" waits for, each with when the facts behind the
-- edge were written (the older of the entry and the holders' part)
local edge_cache = {}
local function edges(node, e)
	if edge_cache[node] then
		return edge_cache[node]
	end
	local out = {}
	for _, km in ipairs(e[4]) do
		for _, who in ipairs(holders_of(km[1])) do
			if who[1] ~= node and (km[2] ~= 's' or who[2] ~= 's') then
				out[#out + 1] = {who[1], math.min(e[2], who[3])}
			end
		end
	end
	for _, other in ipairs(e[5]) do
		out[#out + 1] = {other, e[2]}
	end
	edge_cache[node] = out
	return out
end

-- The strongly connected components of the graph (Tarjan's, without
-- recursion), once: a session is on a cycle only if its component has
-- more than one session, and a path back to it stays in its component.
-- Searching from each wait through everything it reaches cost each
-- script the square of a chain's length (200 waits in a chain across two
-- instances: 73 ms a search, Redis blocked for that long every
-- deadlock_timeout); this costs the graph's size once.
local comp, comp_size = {}, {}
do
	local index_of, low, on_stack, tstack = {}, {}, {}, {}
	local counter, ncomp = 0, 0
	local function open(v, work)
		counter = counter + 1
		index_of[v] = counter
		low[v] = counter
		tstack[#tstack + 1] = v
		on_stack[v] = true
		local e = entry(v)
		work[#work + 1] = {v, e and edges(v, e) or {}, 1}
	end
	for root in pairs(entries) do
		if not index_of[root] then
			local work = {}
			open(root, work)
			while #work > 0 do
				local top = work[#work]
				local v, out, k = top[1], top[2], top[3]
				if k <= #out then
					top[3] = k + 1
					local w = out[k][1]
					if not index_of[w] then
						open(w, work)
					elseif on_stack[w] then
						low[v] = math.min(low[v], index_of[w])
					end
				else
					work[#work] = nil
					if #work > 0 then
						local p = work[#work][1]
						low[p] = math.min(low[p], low[v])
					end
					if low[v] == index_of[v] then
						ncomp = ncomp + 1
						local size, w = 0, nil
						repeat
							w = tstack[#tstack]
							tstack[#tstack] = nil
							on_stack[w] = nil
							comp[w] = ncomp
							size = size + 1
						until w == v
						comp_size[ncomp] = size
					end
				end
			end
		end
	end
end

-- a path from "start" back to it: the sessions on it from start, and the
-- oldest write behind its edges; nil if there is none within the limit
local function cycle(start)
	local first = entry(start)
	if not first or not comp[start] or comp_size[comp[start]] < 2 then
		return nil
	end
	local c = comp[start]
	local parent, written, seen = {}, {}, {[start] = true}
	local stack = {start}
	local visited = 0
	while #stack > 0 and visited < limit do
		local node = table.remove(stack)
		visited = visited + 1
		local e = entry(node)
		if e then
			for _, edge in ipairs(edges(node, e)) do
				local next_node, w = edge[1], edge[2]
				if next_node == start then
					local path, oldest = {}, w
					local n = node
					while n ~= start do
						table.insert(path, 1, n)
						oldest = math.min(oldest, written[n])
						n = parent[n]
					end
					table.insert(path, 1, start)
					return path, oldest
				end
				if not seen[next_node] and comp[next_node] == c then
					seen[next_node] = true
					parent[next_node] = node
					written[next_node] = w
					stack[#stack + 1] = next_node
				end
			end
		end
	end
	return nil
end

local function suspect(node)
	local packed = redis.call('hget', KEYS[3], node)
	if not packed then
		return nil
	end
	local s = decode(packed, valid_suspect)
	if not s or s[3] <= now then
		redis.call('hdel', KEYS[3], node)
		return nil
	end
	return s
end

local victims = {}
local prefix = uuid .. ':'
for _, node in ipairs(check) do
	local path, oldest = cycle(node)
	local ours = true
	local other_suspect = false
	if path then
		for p = 1, #path do
			if string.sub(path[p], 1, #prefix) ~= prefix then
				ours = false
			end
			if p > 1 and suspect(path[p]) then
				other_suspect = true
			end
		end
	end
	if not path or ours then
		redis.call('hdel', KEYS[3], node)
	elseif not other_suspect then
		local sig = table.concat(path, '\n')
		local mine = suspect(node)
		if mine and mine[1] == sig and oldest > mine[2] then
			local v = {node}
			for p = 1, #path do
				v[#v + 1] = entry(path[p])[3]
			end
			victims[#victims + 1] = v
			entries[node] = nil
			redis.call('hdel', KEYS[1], node)
			redis.call('hdel', KEYS[3], node)
		elseif not mine or mine[1] ~= sig then
			redis.call('hset', KEYS[3], node,
				cmsgpack.pack({sig, now, now + 3 * ttl}))
		end
	end
end

redis.call('set', KEYS[4], cmsgpack.pack({written_nodes, written_keys}))
-- the graph goes once no instance has written for an entry's life (an
-- instance that writes less often extends, nobody shortens)
for k = 1, 4 do
	if redis.call('pttl', KEYS[k]) < ttl then
		redis.call('pexpire', KEYS[k], ttl)
	end
end
return {waited, victims}
