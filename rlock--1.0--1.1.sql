/* rlock--1.0--1.1.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION rlock UPDATE TO '1.1'" to load this file. \quit

-- Taking a lock creates a key in Redis that other applications may use
-- too, and holds an entry of the shared table: no longer every role's
-- right.  A superuser grants it to the roles that lock (see
-- doc/configuration.md, "Who may lock").  Releasing, and the information
-- functions, stay open to all: a session can only release its own holds.
REVOKE EXECUTE ON FUNCTION
    rlock_try(text, interval, interval),
    rlock_lock(text, interval),
    rlock_session_try(text, interval, interval),
    rlock_session_lock(text, interval),
    rlock_try_token(text, interval, interval),
    rlock_session_try_token(text, interval, interval)
FROM PUBLIC;

-- Remove a lock whoever holds it and wake its waiters (Redisson's
-- forceUnlock): for superusers and the roles they grant it to.
CREATE FUNCTION rlock_force_release(key text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rlock_force_release'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION rlock_force_release(text) FROM PUBLIC;

-- Who holds a lock, wherever it is held: an rlock session of this or
-- another instance (its name and process), or a Redisson client.  It
-- shows other applications' processes: for monitoring roles.
CREATE FUNCTION rlock_holder(
    key text,
    OUT owner text,
    OUT count integer,
    OUT holder text,
    OUT instance text,
    OUT pid integer,
    OUT lease interval,
    OUT owners integer)
RETURNS record
AS 'MODULE_PATHNAME', 'rlock_holder'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION rlock_holder(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rlock_holder(text) TO pg_read_all_stats;
