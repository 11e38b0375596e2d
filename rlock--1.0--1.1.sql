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
