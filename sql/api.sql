--
-- The SQL interface: taking, re-entering and releasing locks in both
-- scopes, leases, and what the information functions report.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS rlock;
RESET client_min_messages;

-- transaction scope with the default arguments: try once, watchdog lease
BEGIN;
SELECT rlock_try('api:a');
SELECT rlock_held('api:a'), rlock_is_locked('api:a');
SELECT rlock_ttl('api:a') BETWEEN '25s' AND '30s' AS watchdog_lease;
-- re-entry stacks
SELECT rlock_try('api:a');
SELECT rlock_held('api:a');
COMMIT;
-- gone at commit, in this session and in Redis
SELECT rlock_held('api:a'), rlock_is_locked('api:a'), rlock_ttl('api:a');

-- an explicit lease is used as the TTL
BEGIN;
SELECT rlock_try('api:lease', lease => '2 min');
SELECT rlock_ttl('api:lease') BETWEEN '115s' AND '120s' AS explicit_lease;
-- re-entry resets the TTL to the new hold's lease
SELECT rlock_try('api:lease', lease => '10 min');
SELECT rlock_ttl('api:lease') BETWEEN '595s' AND '600s' AS reset_on_reentry;
-- a partial release resets it to the lease of the hold that remains
SELECT rlock_release('api:lease');
SELECT rlock_ttl('api:lease') BETWEEN '115s' AND '120s' AS partial_release;
SELECT rlock_held('api:lease');
ROLLBACK;
SELECT rlock_is_locked('api:lease');

-- a lease below a millisecond is rounded up, not refused
BEGIN;
SELECT rlock_try('api:tiny', lease => '0.5 ms');
ROLLBACK;

-- rlock_lock waits without limit; on a free lock it returns at once
BEGIN;
SELECT rlock_lock('api:b');
SELECT rlock_lock('api:b', '1 hour');
SELECT rlock_held('api:b');
COMMIT;
SELECT rlock_is_locked('api:b');

-- a try with a wait on a free lock returns at once, and outside an
-- explicit transaction block the lock ends with the statement: a
-- WARNING says so, with SQLSTATE 25P01 as for SET LOCAL there
SELECT rlock_try('api:w', '10 s');
\set VERBOSITY sqlstate
SELECT rlock_try('api:w');
\set VERBOSITY default
SELECT rlock_held('api:w'), rlock_is_locked('api:w');
-- none where the lock lasts as long as it is meant to: after BEGIN, in a
-- DO block or a procedure (procedures.sql), in statements sent together
BEGIN;
SELECT rlock_try('api:w');
COMMIT;
DO $$ BEGIN PERFORM rlock_try('api:w'); END $$;
SELECT rlock_try('api:w') \; SELECT rlock_held('api:w');
-- nested blocks, and a DO block that failed, leave the next statement
-- warned as before; a statement locking per row warns once
DO $$ BEGIN EXECUTE 'DO $i$ BEGIN PERFORM rlock_try(''api:w''); END $i$'; END $$;
DO $$ BEGIN PERFORM rlock_try('api:w'); RAISE EXCEPTION 'failed'; END $$;
SELECT rlock_try('api:w');
SELECT count(*) FILTER (WHERE ok) FROM
  (SELECT rlock_try('api:row' || i) AS ok FROM generate_series(1, 3) i) s;

-- session scope
SELECT rlock_session_try('api:s');
SELECT rlock_session_lock('api:s');
SELECT rlock_held('api:s'), rlock_is_locked('api:s');
SELECT rlock_session_release('api:s');
SELECT rlock_held('api:s'), rlock_is_locked('api:s');
SELECT rlock_session_release('api:s');
SELECT rlock_held('api:s'), rlock_is_locked('api:s');

-- rlock_release_all counts holds, not keys
SELECT rlock_session_try('api:r1'), rlock_session_try('api:r1'),
       rlock_session_try('api:r2');
SELECT rlock_release_all();
SELECT rlock_is_locked('api:r1'), rlock_is_locked('api:r2');
SELECT rlock_release_all();

-- keys are any text, braces (Redis cluster hash tags) included
BEGIN;
SELECT rlock_try('{order}:42'), rlock_try('a b'), rlock_try('x{y}z');
SELECT rlock_held('{order}:42'), rlock_held('a b'), rlock_held('x{y}z');
COMMIT;
SELECT rlock_is_locked('{order}:42'), rlock_is_locked('a b');

-- what is never held reads as free
SELECT rlock_held('api:never'), rlock_is_locked('api:never'),
       rlock_ttl('api:never');

-- every function keeps per-session state: volatile and parallel unsafe
SELECT proname, provolatile, proparallel, pronargs
FROM pg_proc WHERE proname LIKE 'rlock%' ORDER BY proname;
