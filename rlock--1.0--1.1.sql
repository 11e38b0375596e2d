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
