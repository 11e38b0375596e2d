--
-- Semaphores (Redisson's permit-expirable semaphore) in one session:
-- setting, adding and reading the count, taking and giving back permits
-- in both scopes, savepoints, the views, bad arguments, a name holding
-- another kind, who may call.  Between sessions, faults and Redisson:
-- TAP tests 089-091, 095.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS rlock;
RESET client_min_messages;

-- the count: set once, added to, read
SELECT rlock_available_permits('se:a');
SELECT rlock_set_permits('se:a', 3), rlock_set_permits('se:a', 10);
SELECT rlock_available_permits('se:a');
SELECT rlock_add_permits('se:a', 2), rlock_add_permits('se:a', -1);
SELECT rlock_available_permits('se:a');

-- permits taken in a transaction come back at its end
BEGIN;
SELECT rlock_try_permits('se:a', 3), rlock_try_permits('se:a');
SELECT rlock_held_permits('se:a'), rlock_available_permits('se:a');
SELECT scope, count, state, kind FROM rlock_locks WHERE key = 'se:a';
-- more than are available: refused at once, nothing taken
SELECT rlock_try_permits('se:a', 2);
SELECT rlock_held_permits('se:a'), rlock_available_permits('se:a');
COMMIT;
SELECT rlock_held_permits('se:a'), rlock_available_permits('se:a');

-- a bounded wait that runs out
SELECT rlock_session_try_permits('se:a', 4);
SELECT rlock_try_permits('se:a', 1, '50 ms');
SELECT rlock_session_release_permits('se:a', 4);

-- savepoints: permits taken in a rolled back subtransaction come back
BEGIN;
SELECT rlock_acquire_permits('se:a', 1);
SAVEPOINT s;
SELECT rlock_acquire_permits('se:a', 2, '30 s');
SELECT rlock_held_permits('se:a'), rlock_available_permits('se:a');
ROLLBACK TO SAVEPOINT s;
SELECT rlock_held_permits('se:a'), rlock_available_permits('se:a');
ROLLBACK;
SELECT rlock_available_permits('se:a');

-- giving back part of a hold, in each scope; more than held: a warning
SELECT rlock_session_acquire_permits('se:a', 3);
BEGIN;
SELECT rlock_try_permits('se:a', 1);
SELECT scope, count FROM rlock_locks WHERE key = 'se:a' ORDER BY scope;
SELECT rlock_release_permits('se:a', 2);
SELECT rlock_release_permits('se:a');
SELECT rlock_session_release_permits('se:a', 2);
SELECT rlock_held_permits('se:a'), rlock_available_permits('se:a');
COMMIT;
SELECT rlock_session_release_permits('se:a', 2);
SELECT rlock_session_release_permits('se:a');
SELECT rlock_held_permits('se:a'), rlock_available_permits('se:a');

-- rlock_release_all gives back session permits too
SELECT rlock_session_try_permits('se:a', 2);
SELECT rlock_release_all(), rlock_available_permits('se:a');

-- a semaphore never set has nothing available; a set of 0 exists
SELECT rlock_try_permits('se:unset');
SELECT rlock_set_permits('se:zero', 0), rlock_set_permits('se:zero', 5),
       rlock_available_permits('se:zero');

-- bad arguments
SELECT rlock_try_permits('se:a', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_try_permits('se:a', -2);
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_try_permits('se:a', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_try_permits(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_try_permits('se:a', 1, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_try_permits('se:a', 1, '-1 s');
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_try_permits('se:a', 1, '0', '0 s');
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_try_permits('', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_release_permits('se:a', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_set_permits('se:a', -1);
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_set_permits('se:a', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_add_permits('se:a', NULL);
\echo :LAST_ERROR_SQLSTATE
-- one session holds at most 1024 permits of one semaphore
SELECT rlock_add_permits('se:a', 2000);
SELECT rlock_session_try_permits('se:a', 1025);
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_session_try_permits('se:a', 1024);
SELECT rlock_session_try_permits('se:a', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_session_release_permits('se:a', 1024);
SELECT rlock_available_permits('se:a');

-- a name holding another kind: Redis's WRONGTYPE, both ways, nothing kept
-- (terse: the detail names the script's SHA1)
\set VERBOSITY terse
SELECT rlock_session_try('se:lock');
SELECT rlock_try_permits('se:lock');
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_set_permits('se:lock', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_session_release('se:lock');
SELECT rlock_session_try('se:zero');
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
SELECT count(*) FROM rlock_locks;

-- who may call: taking and changing the count are granted by a superuser
SELECT p.oid::regprocedure AS function,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_may
FROM pg_proc p WHERE p.proname LIKE 'rlock%permits'
ORDER BY p.oid::regprocedure::text COLLATE "C";
