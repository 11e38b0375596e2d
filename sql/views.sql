--
-- What rlock shows about itself: rlock_locks (holds and their details, by
-- scope; other users' rows gated), rlock_stats and rlock_latency (counters
-- that move with the work done), rlock_stats_reset() (superusers only) and
-- rlock_status() (the worker and its connections).
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS rlock;
RESET client_min_messages;

-- the worker and its connections
SELECT worker_pid IS NOT NULL AS worker_runs,
       instance_owner ~ '^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$' AS uuid_owner,
       redis_address LIKE '127.0.0.1:%' AS address,
       command_connection, subscriber_connection,
       connection_since <= now() AS since,
       redis_version ~ '^(valkey )?[0-9]+\.[0-9]+' AS version, redis_role,
       subscribed_channels, max_locks >= locks_in_use AS room, waiting
FROM rlock_status();
SELECT worker_pid = (SELECT pid FROM pg_stat_activity
                     WHERE backend_type = 'rlock worker') AS same_worker
FROM rlock_status();

-- nothing held: no rows of this session
SELECT count(*) FROM rlock_locks WHERE pid = pg_backend_pid();

-- both scopes on one key, and a lease, and a token
SELECT rlock_stats_reset();
SELECT rlock_session_try('views:a', '0', '1 min');
BEGIN;
SELECT rlock_try('views:a');
SELECT rlock_try('views:a');
SELECT rlock_try_token('views:b') > 0 AS token_taken;
SELECT key, scope, count, state, pid = pg_backend_pid() AS mine,
       owner ~ ('^' || (SELECT instance_owner FROM rlock_status()) || ':[0-9]+$') AS owner,
       lease, watchdog,
       acquired_at BETWEEN now() - interval '1 min' AND clock_timestamp() AS acquired,
       expires_at > clock_timestamp() AS expires_later,
       token IS NOT NULL AS has_token,
       wait_started, wait_until
FROM rlock_locks WHERE pid = pg_backend_pid()
ORDER BY key, scope;
-- each row's lock kind (1.5): the plain kind's name
SELECT key, scope, kind FROM rlock_locks WHERE pid = pg_backend_pid()
ORDER BY key, scope;
-- the lease shown is the one of the newest hold
SELECT expires_at < clock_timestamp() + interval '31 s' AS watchdog_lease
FROM rlock_locks WHERE key = 'views:a' AND scope = 'transaction';
COMMIT;
-- (the releases at commit may still be on their way: shown as releasing)
SELECT key, scope, count, state FROM rlock_locks
WHERE pid = pg_backend_pid() AND state <> 'releasing';
SELECT rlock_session_release('views:a');

-- the counters
SELECT rlock_session_try('views:c');
SELECT acquired, refused, released, timed_out, cancelled, failed, lost,
       round_trips > 0 AS round_trips, round_trip_mean_ms > 0 AS rtt_mean,
       round_trip_max_ms >= round_trip_mean_ms AS rtt_max,
       acquire_max_ms >= acquire_mean_ms AS acquire_max,
       stats_reset <= now() AS reset
FROM rlock_stats;
SELECT rlock_session_release('views:c');

-- the histograms: buckets cover everything counted
SELECT kind, count(*) AS buckets, sum(count) > 0 AS counted,
       bool_and(to_ms > from_ms OR to_ms IS NULL) AS ordered
FROM rlock_latency GROUP BY kind ORDER BY kind;
SELECT (SELECT sum(count) FROM rlock_latency WHERE kind = 'acquire') =
       (SELECT acquired FROM rlock_stats) AS acquire_histogram_complete;

-- other users' rows: the state and the process, not the key
CREATE ROLE rlock_views_alice;
CREATE ROLE rlock_views_bob;
CREATE ROLE rlock_views_stats IN ROLE pg_read_all_stats;
GRANT EXECUTE ON FUNCTION rlock_session_try(text, interval, interval)
    TO rlock_views_alice;
SET SESSION AUTHORIZATION rlock_views_alice;
SELECT rlock_session_try('views:alice');
SELECT key, scope, state FROM rlock_locks WHERE pid = pg_backend_pid();
RESET SESSION AUTHORIZATION;
SET ROLE rlock_views_bob;
SELECT key, scope, count, state, owner, watchdog, acquired_at
FROM rlock_locks WHERE pid = pg_backend_pid();
SELECT kind FROM rlock_locks WHERE pid = pg_backend_pid();
RESET ROLE;
SET ROLE rlock_views_stats;
SELECT key, scope, state FROM rlock_locks WHERE pid = pg_backend_pid();
SELECT kind FROM rlock_locks WHERE pid = pg_backend_pid();
RESET ROLE;
SELECT rlock_session_release('views:alice');
-- only superusers reset the counters
SET ROLE rlock_views_bob;
SELECT rlock_stats_reset();
RESET ROLE;
REVOKE EXECUTE ON FUNCTION rlock_session_try(text, interval, interval)
    FROM rlock_views_alice;
DROP ROLE rlock_views_alice;
DROP ROLE rlock_views_bob;
DROP ROLE rlock_views_stats;

-- a reset zeroes every counter
SELECT rlock_stats_reset();
SELECT acquired + refused + released + timed_out + cancelled + failed AS total
FROM rlock_stats;

-- rlock's locks are not PostgreSQL locks: pg_locks lists the advisory
-- lock, not the rlock; rlock_locks lists the rlock
BEGIN;
SELECT rlock_try('views:pg_locks');
SELECT pg_advisory_xact_lock(42);
SELECT locktype, objid, mode, granted FROM pg_locks
WHERE pid = pg_backend_pid() AND locktype NOT IN ('relation', 'virtualxid');
SELECT key, scope, state FROM rlock_locks WHERE pid = pg_backend_pid();
COMMIT;
