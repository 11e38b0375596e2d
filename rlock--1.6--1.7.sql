/* rlock--1.6--1.7.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION rlock UPDATE TO '1.7'" to load this file. \quit

-- Semaphores: Redisson's permit-expirable semaphore
-- (getPermitExpirableSemaphore), taken in permits, given back by the
-- transaction's (or the session's) end as locks are.  Taking them is for
-- the roles a superuser grants them to, as for locks; so is changing a
-- semaphore's count.
CREATE FUNCTION rlock_try_permits(name text, permits integer DEFAULT 1,
                                  wait interval DEFAULT '0',
                                  lease interval DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rlock_try_permits'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_acquire_permits(name text, permits integer DEFAULT 1,
                                      lease interval DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'rlock_acquire_permits'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_session_try_permits(name text,
                                          permits integer DEFAULT 1,
                                          wait interval DEFAULT '0',
                                          lease interval DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rlock_session_try_permits'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_session_acquire_permits(name text,
                                              permits integer DEFAULT 1,
                                              lease interval DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'rlock_session_acquire_permits'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_set_permits(name text, permits integer)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rlock_set_permits'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_add_permits(name text, permits integer)
RETURNS bigint
AS 'MODULE_PATHNAME', 'rlock_add_permits'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION rlock_try_permits(text, integer, interval, interval),
    rlock_acquire_permits(text, integer, interval),
    rlock_session_try_permits(text, integer, interval, interval),
    rlock_session_acquire_permits(text, integer, interval),
    rlock_set_permits(text, integer),
    rlock_add_permits(text, integer) FROM PUBLIC;

CREATE FUNCTION rlock_release_permits(name text, permits integer DEFAULT 1)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rlock_release_permits'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_session_release_permits(name text,
                                              permits integer DEFAULT 1)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rlock_session_release_permits'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_held_permits(name text)
RETURNS integer
AS 'MODULE_PATHNAME', 'rlock_held_permits'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_available_permits(name text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'rlock_available_permits'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

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

-- Count-down latches: Redisson's (getCountDownLatch).  Anyone may read
-- and wait; setting, counting down and deleting are for the roles a
-- superuser grants them to.
CREATE FUNCTION rlock_latch_set(name text, count bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rlock_latch_set'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_latch_count_down(name text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'rlock_latch_count_down'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_latch_delete(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rlock_latch_delete'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION rlock_latch_set(text, bigint),
    rlock_latch_count_down(text),
    rlock_latch_delete(text) FROM PUBLIC;

CREATE FUNCTION rlock_latch_count(name text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'rlock_latch_count'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_latch_wait(name text, wait interval DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rlock_latch_wait'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
