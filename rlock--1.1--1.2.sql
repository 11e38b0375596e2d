/* rlock--1.1--1.2.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION rlock UPDATE TO '1.2'" to load this file. \quit

-- rlock_status() shows how the primary is found (rlock.topology), the
-- Redis Sentinels and the last failover followed, and the connection
-- that carries acquisitions the replicas must confirm
-- (rlock.sync_replicas).  The columns of 1.1 come first, unchanged.
DROP FUNCTION rlock_status();

CREATE FUNCTION rlock_status(
    OUT worker_pid integer,
    OUT instance_owner text,
    OUT redis_address text,
    OUT command_connection text,
    OUT subscriber_connection text,
    OUT connection_since timestamptz,
    OUT redis_version text,
    OUT redis_role text,
    OUT subscribed_channels integer,
    OUT locks_in_use integer,
    OUT max_locks integer,
    OUT waiting integer,
    OUT last_error text,
    OUT last_error_at timestamptz,
    OUT topology text,
    OUT sentinel text,
    OUT sentinels_known integer,
    OUT sentinels_reachable integer,
    OUT last_failover text,
    OUT last_failover_at timestamptz,
    OUT sync_connection text,
    OUT replicas integer)
RETURNS record
AS 'MODULE_PATHNAME', 'rlock_status'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
