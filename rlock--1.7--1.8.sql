/* rlock--1.7--1.8.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION rlock UPDATE TO '1.8'" to load this file. \quit

-- Who keeps a session waiting for a lock: the sessions of this instance
-- holding it in a conflicting mode, as pg_blocking_pids() tells of
-- PostgreSQL's locks; what the deadlock search follows.  Pids only, as
-- rlock_locks shows them to everybody.
CREATE FUNCTION rlock_blocking_pids(pid integer)
RETURNS integer[]
AS 'MODULE_PATHNAME', 'rlock_blocking_pids'
LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;

-- Every wait of this instance's sessions with who blocks it: local
-- sessions, and whoever holds the key in Redis (another instance's
-- session, a Redisson client), as rlock_holder() reads it: a round trip
-- to Redis per waiting session, and other applications' processes, so
-- for monitoring roles.
CREATE VIEW rlock_waits AS
SELECT l.pid, l.key, l.kind, l.mode, l.wait_started,
       rlock_blocking_pids(l.pid) AS blocking_pids,
       h.holder, h.instance, h.pid AS holder_pid, h.owner AS holder_owner,
       h.owners AS holder_owners
FROM rlock_locks l
LEFT JOIN LATERAL (SELECT * FROM rlock_holder(l.key)
                   WHERE l.kind IN ('plain', 'fair')) h ON true
WHERE l.state = 'waiting';

REVOKE ALL ON rlock_waits FROM PUBLIC;
GRANT SELECT ON rlock_waits TO pg_read_all_stats;
