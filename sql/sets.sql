--
-- Sets of plain locks taken all or none (rlock_try_set and its forms) in
-- one session: each member an ordinary hold in its mode, a key named
-- twice held once, re-entry, both scopes, savepoints, releases by set,
-- an error half-way leaving nothing, the arguments' errors, who may
-- call.  Between sessions: TAP test 094.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS rlock;
RESET client_min_messages;
-- this file's holds (a hold given back shows in rlock_locks with a count
-- of 0 until the worker has sent its release)
CREATE TEMP VIEW st_holds AS
SELECT key, scope, count, mode, watchdog FROM rlock_locks
WHERE key LIKE 'st:%' AND count > 0;

-- each member is an ordinary hold: keys exclusively, shared_keys shared
BEGIN;
SELECT rlock_try_set('{st:a,st:b}', shared_keys => '{st:c}');
SELECT key, scope, count, mode FROM st_holds ORDER BY key;
SELECT rlock_held('st:a'), rlock_held('st:b'), rlock_held_shared('st:c');
COMMIT;
SELECT count(*) FROM st_holds;
SELECT rlock_is_locked('st:a'), rlock_is_locked('st:c');

-- a key named twice is one member; the order given does not matter
BEGIN;
SELECT rlock_try_set('{st:b,st:a,st:b}', '1 s', '20 s');
SELECT key, count, watchdog FROM st_holds ORDER BY key;
-- keys held already are re-entered, as rlock_try re-enters them
SELECT rlock_lock_set('{st:a,st:d}');
SELECT key, count FROM st_holds ORDER BY key;
-- a release by set gives back the newest hold of each member
SELECT rlock_release_set('{st:a,st:b,st:d}');
SELECT key, count FROM st_holds ORDER BY key;
-- and warns about a member it finds no hold of
SELECT rlock_release_set('{st:a,st:none}');
SELECT count(*) FROM st_holds;
COMMIT;

-- the empty set takes and gives back nothing
SELECT rlock_try_set('{}'), rlock_session_try_set('{}', shared_keys => '{}');
SELECT rlock_lock_set('{}'), rlock_session_lock_set('{}');
SELECT rlock_release_set('{}'), rlock_session_release_set('{}', '{}');

-- session scope: kept through commit and rollback, given back by the
-- session form only
SELECT rlock_session_try_set('{st:s1,st:s2}', shared_keys => '{st:s3}');
BEGIN;
SELECT rlock_session_lock_set('{st:s1}', '10 s');
ROLLBACK;
SELECT key, scope, count, mode FROM st_holds ORDER BY key;
BEGIN;
SELECT rlock_release_set('{st:s1}');
COMMIT;
SELECT rlock_session_release_set('{st:s1,st:s2}', '{st:s3}');
SELECT key, count FROM st_holds ORDER BY key;
SELECT rlock_session_release_set('{st:s1}');
SELECT count(*) FROM st_holds;

-- a savepoint rolled back gives back the set taken in it, and keeps the
-- holds from before it
BEGIN;
SELECT rlock_try('st:p1');
SAVEPOINT sp;
SELECT rlock_try_set('{st:p1,st:p2}');
SELECT key, count FROM st_holds ORDER BY key;
ROLLBACK TO SAVEPOINT sp;
SELECT key, count FROM st_holds ORDER BY key;
COMMIT;
SELECT rlock_is_locked('st:p1'), rlock_is_locked('st:p2');

-- a member held shared only cannot be taken exclusively (55000) and a
-- member held as a fair lock not at all (55000): refused before anything
-- is taken
SELECT rlock_session_try_shared('st:m');
SELECT rlock_session_try_set('{st:n,st:m}');
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_held('st:n'), rlock_is_locked('st:n');
-- shared, it is re-entered
SELECT rlock_session_try_set('{st:n}', shared_keys => '{st:m}');
SELECT rlock_held('st:n'), rlock_held_shared('st:m');
SELECT rlock_session_release_set('{st:n}', '{st:m,st:m}');
SELECT rlock_session_release_shared('st:m'), rlock_is_locked('st:m');
SELECT rlock_session_try_fair('st:f');
SELECT rlock_session_try_set('{st:f,st:g}');
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_is_locked('st:g');
SELECT rlock_session_release_fair('st:f');

-- an error half-way through (here: the session's last free entry) gives
-- back what the call took, in session scope too
SET rlock.max_locks_per_session = 3;
SELECT rlock_session_try('st:h');
SELECT rlock_session_try_set('{st:h1,st:h2,st:h3}');
\echo :LAST_ERROR_SQLSTATE
SELECT key, count FROM st_holds ORDER BY key;
SELECT rlock_is_locked('st:h1'), rlock_is_locked('st:h2');
-- a set larger than the session may hold is refused at once (54000)
SELECT rlock_session_try_set('{st:h1,st:h2,st:h3,st:h4}');
\echo :LAST_ERROR_SQLSTATE
-- duplicates count once
SELECT rlock_session_try_set('{st:h1,st:h1}', shared_keys => '{st:h2}');
SELECT rlock_session_release_set('{st:h,st:h1}', '{st:h2}');
RESET rlock.max_locks_per_session;

-- arguments
SELECT rlock_try_set(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_try_set('{st:a}', shared_keys => NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_lock_set('{st:a,NULL}');
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_try_set('{st:a}', shared_keys => '{st:b,NULL}');
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_try_set('{st:a,""}');
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_try_set(ARRAY['st:a', repeat('x', 600)]);
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_try_set('{st:a,st:b}', shared_keys => '{st:c,st:a}');
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_try_set('{st:a}', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_try_set('{st:a}', '-1 s');
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_try_set('{st:a}', '0', '0');
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_session_lock_set('{st:a}', '-1 s');
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_release_set(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_session_release_set('{st:a}', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_session_release_set('{st:a}', '{st:a}');
\echo :LAST_ERROR_SQLSTATE
-- (a two-dimensional array is read as its elements in order)
BEGIN;
SELECT rlock_try_set('{{st:a,st:b},{st:c,st:d}}');
SELECT count(*) FROM st_holds;
COMMIT;
SELECT count(*) FROM st_holds;

-- who may take sets: the roles a superuser grants the functions to;
-- giving them back is for everyone
SELECT p.oid::regprocedure AS function,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_may
FROM pg_proc p WHERE p.proname ~ '^rlock_(session_)?(try|lock|release)_set$'
ORDER BY p.oid::regprocedure::text COLLATE "C";
