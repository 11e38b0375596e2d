--
-- Bad input gets a clear error with an SQLSTATE, and leaves nothing held.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS rlock;
RESET client_min_messages;

-- the key
SELECT rlock_try(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_session_lock(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_try('');
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_held('');
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_is_locked(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_force_release(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_force_release('');
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_try(repeat('k', 513));
\echo :LAST_ERROR_SQLSTATE
-- exactly rlock.max_key_length bytes is fine
SELECT rlock_try(repeat('k', 512));

-- the wait
SELECT rlock_try('err:k', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_try('err:k', '-1 s');
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_session_try('err:k', '178000000 years');
\echo :LAST_ERROR_SQLSTATE
-- at most 365 days: every time computed from it stays in range
SELECT rlock_try('err:k', '365 days 00:00:00.000001');
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_try('err:k', '1 year 6 days');
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_try('err:k', '365 days');

-- the lease
SELECT rlock_try('err:k', '0', '-1 s');
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_try('err:k', '0', '0');
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_lock('err:k', '-5 min');
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_session_lock('err:k', '0 s');
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_session_lock('err:k', '366 days');
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_try('err:k', '0', '2562047788:00:54.775807');
\echo :LAST_ERROR_SQLSTATE
-- the longest lease is sent as it is
BEGIN;
SELECT rlock_try('err:long', '0', '365 days');
SELECT rlock_ttl('err:long') BETWEEN '364 days' AND '365 days';
COMMIT;

-- none of that took a lock
SELECT rlock_held('err:k'), rlock_is_locked('err:k');

-- releasing what is not held: false and a warning, as pg_advisory_unlock
SELECT rlock_release('err:not-held');
SELECT rlock_session_release('err:not-held');
BEGIN;
SELECT rlock_try('err:xact-only');
SELECT rlock_session_release('err:xact-only');
COMMIT;

-- a full lock table (rlock.max_locks = 64 in the test configuration)
SELECT failed AS failed_before FROM rlock_stats \gset
SELECT count(*) FROM generate_series(1, 100) AS i
WHERE rlock_session_try('err:full:' || i);
\echo :LAST_ERROR_SQLSTATE
-- counted as a failed acquire
SELECT failed - :failed_before AS failed FROM rlock_stats;
-- the locks taken before the error are session-scoped: still held
SELECT rlock_release_all() BETWEEN 60 AND 64 AS released;
SELECT rlock_try('err:after-full');

-- PREPARE TRANSACTION is refused while transaction-scoped locks are held
BEGIN;
SELECT rlock_try('err:prepare');
PREPARE TRANSACTION 'rlock_p1';
\echo :LAST_ERROR_SQLSTATE
-- the failed PREPARE rolled back and released the lock
SELECT rlock_held('err:prepare'), rlock_is_locked('err:prepare');
-- (a transaction's advisory lock, by contrast, goes with it)
BEGIN;
SELECT pg_advisory_xact_lock(7);
PREPARE TRANSACTION 'rlock_p3';
SELECT objid, pid IS NULL AS prepared FROM pg_locks WHERE locktype = 'advisory';
ROLLBACK PREPARED 'rlock_p3';
-- session-scoped locks stay with the session and do not prevent it
BEGIN;
SELECT rlock_session_try('err:prepare-session');
PREPARE TRANSACTION 'rlock_p2';
COMMIT PREPARED 'rlock_p2';
SELECT rlock_held('err:prepare-session');
SELECT rlock_session_release('err:prepare-session');

-- a parallel worker cannot hold a lock for the session: refused, as
-- advisory locks are, even through a wrapper wrongly marked PARALLEL SAFE
CREATE FUNCTION err_wrapped_try(k text) RETURNS boolean
LANGUAGE plpgsql PARALLEL SAFE AS $$ BEGIN RETURN rlock_try(k); END $$;
-- (force_parallel_mode is debug_parallel_query from PostgreSQL 16 on)
SELECT current_setting('server_version_num')::int >= 160000 AS pg16 \gset
\if :pg16
SET debug_parallel_query = on;
\else
SET force_parallel_mode = on;
\endif
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET client_min_messages = error;
SELECT err_wrapped_try('err:parallel');
\echo :LAST_ERROR_SQLSTATE
RESET client_min_messages;
\if :pg16
RESET debug_parallel_query;
\else
RESET force_parallel_mode;
\endif
RESET parallel_setup_cost;
RESET parallel_tuple_cost;
SELECT rlock_is_locked('err:parallel');
DROP FUNCTION err_wrapped_try(text);

-- settings out of their ranges (timeouts and margin at most 1 h, the
-- watchdog's lease at most 1 day): the ranges, then refusals by SQLSTATE
-- alone (PostgreSQL 16 words the range with its unit)
SELECT name, min_val, max_val, unit FROM pg_settings
WHERE name IN ('rlock.verify_margin', 'rlock.connect_timeout',
               'rlock.watchdog_timeout')
ORDER BY name;
\set VERBOSITY sqlstate
SET rlock.verify_margin = '61 min';
ALTER SYSTEM SET rlock.connect_timeout = '2 h';
ALTER SYSTEM SET rlock.watchdog_timeout = '25 h';
\set VERBOSITY default

-- one session cannot fill the shared table: rlock.max_locks_per_session
SET rlock.max_locks_per_session = 3;
SELECT count(*) FROM generate_series(1, 5) AS i
WHERE rlock_session_try('err:many:' || i);
\echo :LAST_ERROR_SQLSTATE
-- the three taken stay held, and re-entering one is no new key
SELECT rlock_session_try('err:many:1');
SELECT rlock_release_all();
RESET rlock.max_locks_per_session;
-- only a superuser may change it
CREATE ROLE err_plain;
SET ROLE err_plain;
SET rlock.max_locks_per_session = 1000;
\echo :LAST_ERROR_SQLSTATE
-- nor weaken the check before commit: the default is the safe value
SET rlock.verify_at_commit = lease;
\echo :LAST_ERROR_SQLSTATE
SET rlock.verify_at_commit = off;
\echo :LAST_ERROR_SQLSTATE
SET rlock.verify_margin = 0;
\echo :LAST_ERROR_SQLSTATE
SHOW rlock.verify_at_commit;
RESET ROLE;
-- a superuser may, per role too
ALTER ROLE err_plain SET rlock.verify_at_commit = lease;
SELECT setconfig FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole
WHERE r.rolname = 'err_plain';
ALTER ROLE err_plain RESET rlock.verify_at_commit;
-- 1.0's "always" is the default now
SET rlock.verify_at_commit = always;
SHOW rlock.verify_at_commit;
RESET rlock.verify_at_commit;
DROP ROLE err_plain;

-- DROP EXTENSION is refused while any session holds a lock: the holds
-- would outlive every function that can release them early
SELECT rlock_session_try('err:drop');
DROP EXTENSION rlock;
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_session_release('err:drop');
-- with nothing held it goes through
DROP EXTENSION rlock;

-- version 1.0 granted the locking functions to PUBLIC; 1.1 (what CREATE
-- EXTENSION installs, through the update script) leaves that to a
-- superuser, and ALTER EXTENSION UPDATE revokes it from a 1.0 install
CREATE ROLE err_app;
CREATE EXTENSION rlock VERSION '1.0';
SELECT has_function_privilege('err_app', 'rlock_try(text, interval, interval)', 'EXECUTE') AS may_lock_1_0;
ALTER EXTENSION rlock UPDATE TO '1.1';
SELECT extversion FROM pg_extension WHERE extname = 'rlock';
-- the library serves the 14 columns of 1.1's rlock_status() too
SELECT array_length(proallargtypes, 1) AS status_columns_1_1
FROM pg_proc WHERE proname = 'rlock_status';
SELECT worker_pid IS NOT NULL AS status_1_1 FROM rlock_status();
SELECT p.oid::regprocedure AS function,
       has_function_privilege('err_app', p.oid, 'EXECUTE') AS granted
FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.classid = 'pg_proc'::regclass
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'rlock'
ORDER BY p.oid::regprocedure::text COLLATE "C";
SET ROLE err_app;
SELECT rlock_try('err:not-granted');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
-- granted as the documentation says
GRANT EXECUTE ON FUNCTION rlock_try(text, interval, interval) TO err_app;
SET ROLE err_app;
SELECT rlock_try('err:granted');
RESET ROLE;
REVOKE EXECUTE ON FUNCTION rlock_try(text, interval, interval) FROM err_app;
DROP ROLE err_app;
-- and the 19 columns of 1.2's rlock_stats, the 22 of its rlock_status()
ALTER EXTENSION rlock UPDATE TO '1.2';
SELECT acquired IS NOT NULL AS stats_1_2 FROM rlock_stats;
SELECT topology AS status_1_2 FROM rlock_status();
-- an update keeps the grants made since the install on what it makes
-- again, and pg_dump still sees them as the user's (pg_init_privs as a
-- fresh install has it): here the 25 columns of 1.3's rlock_status() and
-- 22 of its rlock_stats
CREATE ROLE err_monitor;
REVOKE EXECUTE ON FUNCTION rlock_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rlock_status() TO err_monitor;
REVOKE SELECT ON rlock_stats FROM PUBLIC;
GRANT SELECT ON rlock_stats TO err_monitor;
-- grants a role passed on with its grant option keep that role as their
-- grantor: revoking its option with CASCADE still takes them away
CREATE ROLE err_lead;
CREATE ROLE err_deputy;
GRANT EXECUTE ON FUNCTION rlock_status() TO err_lead WITH GRANT OPTION;
GRANT SELECT ON rlock_stats TO err_lead WITH GRANT OPTION;
SET ROLE err_lead;
GRANT EXECUTE ON FUNCTION rlock_status() TO err_deputy;
GRANT SELECT ON rlock_stats TO err_deputy;
RESET ROLE;
ALTER EXTENSION rlock UPDATE TO '1.3';
SELECT cluster_pubsub IS NULL AS status_1_3 FROM rlock_status();
SELECT has_function_privilege('err_monitor', 'rlock_status()', 'EXECUTE') AS monitor_may,
       has_function_privilege('public', 'rlock_status()', 'EXECUTE') AS public_may,
       has_table_privilege('err_monitor', 'rlock_stats', 'SELECT') AS monitor_reads,
       has_table_privilege('public', 'rlock_stats', 'SELECT') AS public_reads;
SELECT count(*) AS public_select_as_installed FROM pg_init_privs p,
LATERAL aclexplode(p.initprivs) a
WHERE p.objoid = 'rlock_stats'::regclass AND a.grantee = 0;
-- a view using rlock_status() stops the update, which changes nothing
CREATE VIEW err_status_view AS SELECT worker_pid FROM rlock_status();
CREATE VIEW err_stats_view AS SELECT acquired FROM rlock_stats;
-- doc/operations.md's query finds them
SELECT DISTINCT v.oid::regclass AS view_to_drop_first
FROM pg_depend d
JOIN pg_rewrite r ON r.oid = d.objid AND d.classid = 'pg_rewrite'::regclass
JOIN pg_class v ON v.oid = r.ev_class
WHERE d.refobjid IN ('rlock_status()'::regprocedure, 'rlock_stats()'::regprocedure,
                     'rlock_stats'::regclass)
  AND v.oid <> 'rlock_stats'::regclass
ORDER BY 1;
DROP VIEW err_stats_view;
-- (PostgreSQL 18 adds the script's line as CONTEXT)
\set SHOW_CONTEXT never
ALTER EXTENSION rlock UPDATE TO '1.4';
\set SHOW_CONTEXT errors
\echo :LAST_ERROR_SQLSTATE
SELECT extversion FROM pg_extension WHERE extname = 'rlock';
DROP VIEW err_status_view;
ALTER EXTENSION rlock UPDATE TO '1.4';
SELECT has_function_privilege('err_monitor', 'rlock_status()', 'EXECUTE') AS monitor_may,
       has_function_privilege('public', 'rlock_status()', 'EXECUTE') AS public_may;
SELECT count(*) AS init_privs_of_status FROM pg_init_privs
WHERE objoid = 'rlock_status()'::regprocedure;
SELECT a.grantee::regrole AS grantee, a.privilege_type,
       CASE WHEN a.grantor = p.proowner THEN 'the owner'
            ELSE a.grantor::regrole::text END AS grantor, a.is_grantable
FROM pg_proc p, aclexplode(p.proacl) a
WHERE p.oid = 'rlock_status()'::regprocedure AND a.grantee <> p.proowner
ORDER BY a.grantee::regrole::text COLLATE "C";
SELECT a.grantee::regrole AS grantee, a.privilege_type,
       CASE WHEN a.grantor = c.relowner THEN 'the owner'
            ELSE a.grantor::regrole::text END AS grantor, a.is_grantable
FROM pg_class c, aclexplode(c.relacl) a
WHERE c.oid = 'rlock_stats'::regclass AND a.grantee <> c.relowner
ORDER BY a.grantee::regrole::text COLLATE "C";
REVOKE EXECUTE ON FUNCTION rlock_status() FROM err_lead CASCADE;
REVOKE SELECT ON rlock_stats FROM err_lead CASCADE;
SELECT has_function_privilege('err_deputy', 'rlock_status()', 'EXECUTE') AS deputy_may,
       has_table_privilege('err_deputy', 'rlock_stats', 'SELECT') AS deputy_reads;
DROP ROLE err_lead, err_deputy;
SELECT sync_wait IS NOT NULL AS status_1_4 FROM rlock_status();
-- the 1.5 library serves 1.4's rlock_locks, without the kind
SELECT rlock_session_try('err:kind');
SELECT array_length(proallargtypes, 1) AS locks_columns_1_4
FROM pg_proc WHERE proname = 'rlock_locks';
SELECT key, state FROM rlock_locks WHERE key = 'err:kind';
-- 1.5's rlock_locks adds the kind, last; the grants on the view are kept
REVOKE SELECT ON rlock_locks FROM PUBLIC;
GRANT SELECT ON rlock_locks TO err_monitor;
ALTER EXTENSION rlock UPDATE TO '1.5';
SELECT array_length(proallargtypes, 1) AS locks_columns_1_5
FROM pg_proc WHERE proname = 'rlock_locks';
SELECT key, state, kind FROM rlock_locks WHERE key = 'err:kind';
SELECT has_table_privilege('err_monitor', 'rlock_locks', 'SELECT') AS monitor_sees_locks,
       has_table_privilege('public', 'rlock_locks', 'SELECT') AS public_sees_locks;
SELECT count(*) AS public_select_locks_as_installed FROM pg_init_privs p,
LATERAL aclexplode(p.initprivs) a
WHERE p.objoid = 'rlock_locks'::regclass AND a.grantee = 0;
-- 1.6's adds the mode, last, and keeps the grants again
ALTER EXTENSION rlock UPDATE TO '1.6';
SELECT array_length(proallargtypes, 1) AS locks_columns_1_6
FROM pg_proc WHERE proname = 'rlock_locks';
SELECT key, state, kind, mode FROM rlock_locks WHERE key = 'err:kind';
SELECT has_table_privilege('err_monitor', 'rlock_locks', 'SELECT') AS monitor_sees_locks_1_6,
       has_table_privilege('public', 'rlock_locks', 'SELECT') AS public_sees_locks_1_6;
-- 1.7's semaphores and sets: taken by the roles granted them, given
-- back by anyone
ALTER EXTENSION rlock UPDATE TO '1.7';
SELECT extversion FROM pg_extension WHERE extname = 'rlock';
SELECT has_function_privilege('public', 'rlock_try_permits(text, integer, interval, interval)', 'EXECUTE') AS public_takes_permits,
       has_function_privilege('public', 'rlock_release_permits(text, integer)', 'EXECUTE') AS public_gives_back_permits;
SELECT has_function_privilege('public', 'rlock_try_set(text[], interval, interval, text[])', 'EXECUTE') AS public_may_take_sets,
       has_function_privilege('public', 'rlock_release_set(text[], text[])', 'EXECUTE') AS public_may_release_sets;
-- 1.8's rlock_blocking_pids for everybody, rlock_waits for monitoring
ALTER EXTENSION rlock UPDATE TO '1.8';
SELECT has_function_privilege('public', 'rlock_blocking_pids(integer)', 'EXECUTE') AS public_sees_blocking_pids,
       has_table_privilege('public', 'rlock_waits', 'SELECT') AS public_sees_waits,
       has_table_privilege('pg_read_all_stats', 'rlock_waits', 'SELECT') AS monitor_sees_waits;
SELECT rlock_blocking_pids(pg_backend_pid()) AS blocking_me;
SELECT rlock_session_release('err:kind');
-- a fresh install is the same as an updated one
DROP EXTENSION rlock;
DROP ROLE err_monitor;
-- PostgreSQL 17 records the roles that initial privileges name
-- (pg_shdepend, 'i'), but the roles initdb made; an update that sets the
-- user's grants again must leave exactly those, as PostgreSQL keeps them:
-- none for a role granted to since (or it could not be dropped), and
-- still those of the superuser that installed (none for the bootstrap
-- superuser, so another one installs here)
CREATE ROLE err_admin SUPERUSER;
CREATE ROLE err_reader;
CREATE VIEW err_initacl_wrong AS
WITH ext AS (
    SELECT classid, objid FROM pg_depend
    WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
      AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'rlock')),
recorded AS (
    SELECT d.classid, d.objid, d.objsubid, d.refobjid AS role
    FROM pg_shdepend d JOIN ext USING (classid, objid)
    WHERE d.deptype = 'i'
      AND d.dbid = (SELECT oid FROM pg_database
                    WHERE datname = current_database())),
named AS (
    SELECT p.classoid AS classid, p.objoid AS objid, p.objsubid, m.role
    FROM pg_init_privs p
    JOIN ext ON ext.classid = p.classoid AND ext.objid = p.objoid,
    LATERAL (SELECT grantee FROM aclexplode(p.initprivs)
             UNION SELECT grantor FROM aclexplode(p.initprivs)) m(role)
    WHERE m.role >= 16384
      AND current_setting('server_version_num')::int >= 170000)
SELECT CASE WHEN n.role IS NULL THEN 'left behind' ELSE 'missing' END AS record,
       pg_describe_object(coalesce(r.classid, n.classid),
                          coalesce(r.objid, n.objid),
                          coalesce(r.objsubid, n.objsubid)) AS object,
       coalesce(r.role, n.role)::regrole AS role
FROM recorded r FULL JOIN named n
  ON n.classid = r.classid AND n.objid = r.objid
 AND n.objsubid = r.objsubid AND n.role = r.role
WHERE r.role IS NULL OR n.role IS NULL;
SET ROLE err_admin;
CREATE EXTENSION rlock VERSION '1.1';
GRANT EXECUTE ON FUNCTION rlock_status() TO err_reader;
ALTER EXTENSION rlock UPDATE TO '1.2';
GRANT SELECT ON rlock_stats TO err_reader WITH GRANT OPTION;
GRANT EXECUTE ON FUNCTION rlock_stats() TO err_reader;
GRANT SELECT ON rlock_locks TO err_reader;
ALTER EXTENSION rlock UPDATE TO '1.8';
SELECT * FROM err_initacl_wrong ORDER BY 2, 3::text;
-- (no records before PostgreSQL 17)
SELECT count(*) > 0 OR current_setting('server_version_num')::int < 170000
       AS admin_recorded
FROM pg_shdepend WHERE deptype = 'i' AND refobjid = 'err_admin'::regrole;
DROP EXTENSION rlock;
CREATE EXTENSION rlock;
SELECT * FROM err_initacl_wrong ORDER BY 2, 3::text;
DROP EXTENSION rlock;
RESET ROLE;
DROP VIEW err_initacl_wrong;
DROP ROLE err_reader, err_admin;
CREATE EXTENSION rlock;
SELECT extversion FROM pg_extension WHERE extname = 'rlock';
SELECT count(*) AS init_privs_of_status_fresh FROM pg_init_privs
WHERE objoid = 'rlock_status()'::regprocedure;
-- 1.2's rlock_status() adds the topology and the sync connection
SELECT topology, sentinel, sentinels_known, last_failover, sync_connection
FROM rlock_status();
-- 1.3's adds a Redis Cluster's, and rlock_stats its redirections
SELECT cluster_node, cluster_primaries, cluster_pubsub FROM rlock_status();
SELECT cluster_moved, cluster_ask, cluster_retries FROM rlock_stats;
-- 1.4's what acquisitions wait for and the replicas confirming
SELECT sync_wait, replicas_confirming, last_sync_failure,
       last_sync_failure_at FROM rlock_status();
SELECT count(*) AS granted_to_public FROM pg_proc p
JOIN pg_depend d ON d.objid = p.oid AND d.classid = 'pg_proc'::regclass
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'rlock'
WHERE p.proname IN ('rlock_try', 'rlock_lock', 'rlock_session_try',
                    'rlock_session_lock', 'rlock_try_token',
                    'rlock_session_try_token')
  AND (p.proacl IS NULL OR EXISTS (SELECT 1 FROM aclexplode(p.proacl) a
                                   WHERE a.grantee = 0));
SELECT rlock_try('err:after-drop');
