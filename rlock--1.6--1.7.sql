/* rlock--1.6--1.7.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION rlock UPDATE TO '1.7'" to load this file. \quit

-- Sets: plain locks taken all or none in one call, in one order for
-- every session (keys exclusively, shared_keys as Redisson's read lock).
-- Taking them is for the roles a superuser grants them to, as for the
-- single locks; giving them back is for everyone, as rlock_release is.
CREATE FUNCTION rlock_try_set(keys text[], wait interval DEFAULT '0',
                              lease interval DEFAULT NULL,
                              shared_keys text[] DEFAULT '{}')
RETURNS boolean
AS 'MODULE_PATHNAME', 'rlock_try_set'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_lock_set(keys text[], lease interval DEFAULT NULL,
                               shared_keys text[] DEFAULT '{}')
RETURNS void
AS 'MODULE_PATHNAME', 'rlock_lock_set'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_session_try_set(keys text[], wait interval DEFAULT '0',
                                      lease interval DEFAULT NULL,
                                      shared_keys text[] DEFAULT '{}')
RETURNS boolean
AS 'MODULE_PATHNAME', 'rlock_session_try_set'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_session_lock_set(keys text[], lease interval DEFAULT NULL,
                                       shared_keys text[] DEFAULT '{}')
RETURNS void
AS 'MODULE_PATHNAME', 'rlock_session_lock_set'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION rlock_try_set(text[], interval, interval, text[]),
    rlock_lock_set(text[], interval, text[]),
    rlock_session_try_set(text[], interval, interval, text[]),
    rlock_session_lock_set(text[], interval, text[]) FROM PUBLIC;

CREATE FUNCTION rlock_release_set(keys text[], shared_keys text[] DEFAULT '{}')
RETURNS integer
AS 'MODULE_PATHNAME', 'rlock_release_set'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_session_release_set(keys text[],
                                          shared_keys text[] DEFAULT '{}')
RETURNS integer
AS 'MODULE_PATHNAME', 'rlock_session_release_set'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
