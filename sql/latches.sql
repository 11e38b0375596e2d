--
-- Count-down latches (Redisson's) in one session: set, count down, read,
-- delete, wait, bad arguments, a name holding another kind, who may
-- call.  Between sessions and with Redisson: TAP tests 092 and 093.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS rlock;
RESET client_min_messages;

-- no latch: count 0, a wait ends at once, counting down changes nothing
SELECT rlock_latch_count('la:none'), rlock_latch_wait('la:none'),
       rlock_latch_count_down('la:none'), rlock_latch_delete('la:none');

-- set once, counted down to zero; each step's count
SELECT rlock_latch_set('la:a', 3), rlock_latch_set('la:a', 9);
SELECT rlock_latch_count('la:a');
SELECT rlock_latch_wait('la:a', '20 ms');
SELECT rlock_latch_count_down('la:a'), rlock_latch_count_down('la:a');
SELECT rlock_latch_wait('la:a', '0');
SELECT rlock_latch_count_down('la:a'), rlock_latch_count('la:a');
SELECT rlock_latch_wait('la:a', '0'), rlock_latch_wait('la:a');
SELECT rlock_latch_count_down('la:a');
-- set again once open
SELECT rlock_latch_set('la:a', 1), rlock_latch_count('la:a');
SELECT rlock_latch_delete('la:a'), rlock_latch_count('la:a');

-- a wait holds nothing, in a transaction either (its empty "hold" is
-- given back without waiting for the worker: it may show as releasing
-- for a moment)
BEGIN;
SELECT rlock_latch_wait('la:a', '1 s');
SELECT count(*) FROM rlock_locks WHERE state <> 'releasing';
COMMIT;

-- bad arguments
SELECT rlock_latch_set('la:b', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_latch_set('la:b', -1);
\echo :LAST_ERROR_SQLSTATE
-- beyond 2^53 - 1, which Redis's scripts would round
SELECT rlock_latch_set('la:b', 9007199254740992);
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_latch_set('la:b', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_latch_set(NULL, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_latch_count('');
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_latch_wait('la:b', '-1 s');
\echo :LAST_ERROR_SQLSTATE

-- a name holding another kind: Redis's WRONGTYPE (terse: the detail
-- names the script's SHA1)
\set VERBOSITY terse
SELECT rlock_session_try('la:lock');
SELECT rlock_latch_count_down('la:lock');
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_latch_wait('la:lock', '0');
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_session_release('la:lock');
\set VERBOSITY default
SELECT count(*) FROM rlock_locks;

-- who may call: setting, counting down and deleting are granted
SELECT p.oid::regprocedure AS function,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_may
FROM pg_proc p WHERE p.proname LIKE 'rlock_latch%'
ORDER BY p.oid::regprocedure::text COLLATE "C";
