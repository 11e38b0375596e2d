/* rlock--1.0.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION rlock" to load this file. \quit

-- Transaction scope: held until the transaction (or the savepoint it was
-- taken in) ends.

CREATE FUNCTION rlock_try(key text, wait interval DEFAULT '0',
                          lease interval DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rlock_try'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_lock(key text, lease interval DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'rlock_lock'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_release(key text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rlock_release'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Session scope: held until released or until the session ends.

CREATE FUNCTION rlock_session_try(key text, wait interval DEFAULT '0',
                                  lease interval DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rlock_session_try'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_session_lock(key text, lease interval DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'rlock_session_lock'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_session_release(key text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rlock_session_release'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_release_all()
RETURNS integer
AS 'MODULE_PATHNAME', 'rlock_release_all'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Fencing tokens: Redisson's fenced-lock counter, one more on every
-- acquisition that asks for one, on any client.

CREATE FUNCTION rlock_try_token(key text, wait interval DEFAULT '0',
                                lease interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'rlock_try_token'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_session_try_token(key text, wait interval DEFAULT '0',
                                        lease interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'rlock_session_try_token'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_token(key text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'rlock_token'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Information.

CREATE FUNCTION rlock_held(key text)
RETURNS integer
AS 'MODULE_PATHNAME', 'rlock_held'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_is_locked(key text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rlock_is_locked'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_ttl(key text)
RETURNS interval
AS 'MODULE_PATHNAME', 'rlock_ttl'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
