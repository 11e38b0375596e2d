/* rlock--1.2--1.3.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION rlock UPDATE TO '1.3'" to load this file. \quit

-- Redis Cluster (rlock.topology = cluster): rlock_status() shows the node
-- asked for the slot map, the primaries in it and the pub/sub namespace
-- of unlock messages; rlock_stats counts the redirections followed.  The
-- columns of 1.2 come first, unchanged.
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
    OUT replicas integer,
    OUT cluster_node text,
    OUT cluster_primaries integer,
    OUT cluster_pubsub text)
RETURNS record
AS 'MODULE_PATHNAME', 'rlock_status'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

DROP VIEW rlock_stats;
DROP FUNCTION rlock_stats();

CREATE FUNCTION rlock_stats(
    OUT acquired bigint,
    OUT refused bigint,
    OUT timed_out bigint,
    OUT cancelled bigint,
    OUT failed bigint,
    OUT released bigint,
    OUT lost bigint,
    OUT renewals bigint,
    OUT renewal_calls bigint,
    OUT reconnects bigint,
    OUT redis_errors bigint,
    OUT subscriptions bigint,
    OUT unlock_messages bigint,
    OUT round_trips bigint,
    OUT round_trip_mean_ms double precision,
    OUT round_trip_max_ms double precision,
    OUT acquire_mean_ms double precision,
    OUT acquire_max_ms double precision,
    OUT stats_reset timestamptz,
    OUT cluster_moved bigint,
    OUT cluster_ask bigint,
    OUT cluster_retries bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'rlock_stats'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE VIEW rlock_stats AS SELECT * FROM rlock_stats();
GRANT SELECT ON rlock_stats TO PUBLIC;
