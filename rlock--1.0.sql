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

-- Observability: the locks of this instance, counters since start, and
-- the worker's connections.  Rows of other users' sessions show only the
-- process and the state, as pg_stat_activity does.

CREATE FUNCTION rlock_locks(
    OUT key text,
    OUT scope text,
    OUT count integer,
    OUT state text,
    OUT pid integer,
    OUT owner text,
    OUT lease interval,
    OUT watchdog boolean,
    OUT acquired_at timestamptz,
    OUT expires_at timestamptz,
    OUT token bigint,
    OUT wait_started timestamptz,
    OUT wait_until timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'rlock_locks'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE VIEW rlock_locks AS SELECT * FROM rlock_locks();
GRANT SELECT ON rlock_locks TO PUBLIC;

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
    OUT stats_reset timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'rlock_stats'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE VIEW rlock_stats AS SELECT * FROM rlock_stats();
GRANT SELECT ON rlock_stats TO PUBLIC;

CREATE FUNCTION rlock_latency(
    OUT kind text,
    OUT from_ms double precision,
    OUT to_ms double precision,
    OUT count bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'rlock_latency_buckets'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE VIEW rlock_latency AS SELECT * FROM rlock_latency();
GRANT SELECT ON rlock_latency TO PUBLIC;

CREATE FUNCTION rlock_stats_reset()
RETURNS void
AS 'MODULE_PATHNAME', 'rlock_stats_reset_all'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION rlock_stats_reset() FROM PUBLIC;

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
    OUT last_error_at timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'rlock_status'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
