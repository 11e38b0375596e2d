--
-- Fair locks (Redisson's getFairLock) in one session: taken, re-entered,
-- counted, both scopes, the views, a key held in the plain kind refused
-- and the reverse, release warnings, who may call.  Between sessions and
-- with Redisson: TAP tests 082 and 083.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS rlock;
RESET client_min_messages;

BEGIN;
SELECT rlock_try_fair('fa:a'), rlock_try_fair('fa:a', '1 s', '20 s');
SELECT rlock_held_fair('fa:a'), rlock_held('fa:a'), rlock_is_locked('fa:a');
SELECT scope, count, state, kind, mode FROM rlock_locks WHERE key = 'fa:a';
SELECT holder, count, owners FROM rlock_holder('fa:a');
COMMIT;
SELECT rlock_held_fair('fa:a'), rlock_is_locked('fa:a');

-- both scopes; rlock_lock_fair waits without limit (here: free)
SELECT rlock_session_try_fair('fa:b');
BEGIN;
SELECT rlock_lock_fair('fa:b');
SELECT scope, count, kind FROM rlock_locks WHERE key = 'fa:b' ORDER BY scope;
COMMIT;
SELECT rlock_session_lock_fair('fa:b');
SELECT rlock_held_fair('fa:b');
SELECT rlock_session_release_fair('fa:b'), rlock_session_release_fair('fa:b');
SELECT rlock_is_locked('fa:b');

-- a key is held in one kind at a time
SELECT rlock_session_try_fair('fa:k');
SELECT rlock_session_try('fa:k');
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_session_try_shared('fa:k');
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_session_release_fair('fa:k');
SELECT rlock_session_try('fa:k');
SELECT rlock_session_try_fair('fa:k');
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_session_release('fa:k');

-- releases
SELECT rlock_session_release_fair('fa:none');
SELECT rlock_session_try_fair('fa:s');
BEGIN;
SELECT rlock_release_fair('fa:s');
COMMIT;
SELECT rlock_release_all();
SELECT rlock_is_locked('fa:s');

-- rlock_force_release removes a fair lock
SELECT rlock_session_try_fair('fa:f');
SELECT rlock_force_release('fa:f'), rlock_is_locked('fa:f');
SELECT rlock_held_fair('fa:f');

-- who may take fair locks: the roles a superuser grants the functions to
SELECT p.oid::regprocedure AS function,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_may
FROM pg_proc p WHERE p.proname LIKE 'rlock%fair'
ORDER BY p.oid::regprocedure::text COLLATE "C";
