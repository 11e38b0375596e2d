--
-- Shared holds (Redisson's read lock) beside exclusive ones, in one
-- session: counts per mode, upgrades, keeping a shared hold after the
-- exclusive one, releases naming their mode, the views.  Between
-- sessions: the isolation spec shared_matrix.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS rlock;
RESET client_min_messages;

-- a shared hold, re-entered, counted apart from the exclusive ones
BEGIN;
SELECT rlock_try_shared('sh:a'), rlock_try_shared('sh:a', '1 s', '20 s');
SELECT rlock_held_shared('sh:a'), rlock_held('sh:a'), rlock_is_locked('sh:a');
SELECT scope, count, state, kind, mode, watchdog FROM rlock_locks
WHERE key = 'sh:a';
SELECT holder, count, owners FROM rlock_holder('sh:a');
COMMIT;
SELECT rlock_held_shared('sh:a'), rlock_is_locked('sh:a');

-- both scopes; rlock_lock_shared waits without limit (here: free)
SELECT rlock_session_try_shared('sh:b');
BEGIN;
SELECT rlock_lock_shared('sh:b');
SELECT scope, count, mode FROM rlock_locks WHERE key = 'sh:b' ORDER BY scope;
COMMIT;
SELECT rlock_held_shared('sh:b');
SELECT rlock_session_lock_shared('sh:b');
SELECT rlock_session_release_shared('sh:b'), rlock_session_release_shared('sh:b');
SELECT rlock_held_shared('sh:b'), rlock_is_locked('sh:b');

-- an upgrade: a session that is the only holder of a key it holds shared
-- takes it exclusively as well, in any form; the lock is then what a
-- session holding it exclusively and then shared holds (mode write, two
-- owner fields), and the commit gives both back.  With other holders an
-- upgrade waits for them (isolation spec shared_matrix)
BEGIN;
SELECT rlock_try_shared('sh:u');
SELECT rlock_try('sh:u', '1 s');
SELECT rlock_held('sh:u'), rlock_held_shared('sh:u');
SELECT mode, count FROM rlock_locks WHERE key = 'sh:u' ORDER BY mode;
SELECT holder, owners FROM rlock_holder('sh:u');
COMMIT;
SELECT rlock_is_locked('sh:u');
SELECT rlock_session_try_shared('sh:u');
SELECT rlock_session_lock('sh:u');
SELECT rlock_session_try_token('sh:u') > 0;
SELECT rlock_held('sh:u'), rlock_held_shared('sh:u');
-- the exclusive holds go, the shared one stays: a read lock again
SELECT rlock_session_release('sh:u'), rlock_session_release('sh:u');
SELECT rlock_held('sh:u'), rlock_held_shared('sh:u');
SELECT holder, owners FROM rlock_holder('sh:u');
SELECT rlock_session_release_shared('sh:u'), rlock_is_locked('sh:u');
-- a savepoint rolled back takes the upgrade back, not the shared hold
BEGIN;
SELECT rlock_try_shared('sh:u');
SAVEPOINT s;
SELECT rlock_try('sh:u');
ROLLBACK TO SAVEPOINT s;
SELECT rlock_held('sh:u'), rlock_held_shared('sh:u');
SELECT holder, owners FROM rlock_holder('sh:u');
COMMIT;
SELECT rlock_is_locked('sh:u');

-- exclusive first, then shared: both held (Redisson's writer may take
-- the read lock), and the shared hold stays after the exclusive one goes
SELECT rlock_session_try('sh:d'), rlock_session_try_shared('sh:d');
SELECT rlock_held('sh:d'), rlock_held_shared('sh:d');
SELECT mode, count FROM rlock_locks WHERE key = 'sh:d' ORDER BY mode;
SELECT owners FROM rlock_holder('sh:d');
SELECT rlock_session_release('sh:d');
SELECT rlock_held('sh:d'), rlock_held_shared('sh:d'), rlock_is_locked('sh:d');
SELECT owners, count FROM rlock_holder('sh:d');
-- now shared only: exclusive is an upgrade, this session the only holder
SELECT rlock_session_try('sh:d');
SELECT rlock_session_release('sh:d');
SELECT rlock_session_release_shared('sh:d'), rlock_is_locked('sh:d');

-- releases name their mode
SELECT rlock_session_release_shared('sh:none');
SELECT rlock_session_try('sh:m');
SELECT rlock_session_release_shared('sh:m');
SELECT rlock_session_release('sh:m');
SELECT rlock_session_try_shared('sh:m');
SELECT rlock_session_release('sh:m');
BEGIN;
SELECT rlock_release_shared('sh:m');
COMMIT;
SELECT rlock_session_release_shared('sh:m');

-- rlock_release_all gives back shared holds too
SELECT rlock_session_try_shared('sh:r1'), rlock_session_try_shared('sh:r1'),
       rlock_session_try('sh:r2');
SELECT rlock_release_all();
SELECT rlock_held_shared('sh:r1'), rlock_is_locked('sh:r1'),
       rlock_is_locked('sh:r2');

-- a shared hold taken in a savepoint rolled back is given back
BEGIN;
SELECT rlock_try_shared('sh:sp0');
SAVEPOINT s;
SELECT rlock_try_shared('sh:sp'), rlock_try_shared('sh:sp0');
ROLLBACK TO s;
SELECT rlock_held_shared('sh:sp'), rlock_held_shared('sh:sp0'),
       rlock_is_locked('sh:sp');
COMMIT;
SELECT rlock_is_locked('sh:sp0');

-- force removes a shared lock
SELECT rlock_session_try_shared('sh:f');
SELECT rlock_force_release('sh:f'), rlock_is_locked('sh:f');
SELECT rlock_held_shared('sh:f');

-- who may take shared locks: the roles a superuser grants the functions
-- to, as for the exclusive forms; releasing and counting are for all
SELECT p.oid::regprocedure AS function,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_may
FROM pg_proc p WHERE p.proname LIKE 'rlock%shared'
ORDER BY p.oid::regprocedure::text COLLATE "C";
