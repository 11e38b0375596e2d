/* rlock--1.2--1.3.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION rlock UPDATE TO '1.3'" to load this file. \quit

-- Redis Cluster (rlock.topology = cluster): rlock_status() shows the node
-- asked for the slot map, the primaries in it and the pub/sub namespace
-- of unlock messages; rlock_stats counts the redirections followed.  The
-- columns of 1.2 come first, unchanged.
-- The grants made since the install on what this script makes again
-- (DROP forgets them) are kept: saved here, set again at the end, with
-- pg_init_privs left as a fresh install leaves it, so that pg_dump still
-- dumps them as the user's.  A view of the user's using what is dropped
-- makes the update fail (2BP01): drop it first, and make it again after
-- (doc/operations.md says so).
SELECT set_config('rlock_upgrade.function_rlock_status', coalesce(proacl::text, ''), true)
FROM pg_catalog.pg_proc WHERE oid = 'rlock_status()'::regprocedure;
SELECT set_config('rlock_upgrade.function_rlock_stats', coalesce(proacl::text, ''), true)
FROM pg_catalog.pg_proc WHERE oid = 'rlock_stats()'::regprocedure;
SELECT set_config('rlock_upgrade.table_rlock_stats', coalesce(relacl::text, ''), true)
FROM pg_catalog.pg_class WHERE oid = 'rlock_stats'::regclass;

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

-- set again the grants saved above
DO $$
DECLARE
    o record;
    catalog regclass;
    target oid;
    saved aclitem[];
    fresh aclitem[];
    keep oid[];
    a record;
    me name := current_user;
BEGIN
    FOR o IN SELECT * FROM (VALUES
        ('FUNCTION', 'rlock_status()'),
        ('FUNCTION', 'rlock_stats()'),
        ('TABLE', 'rlock_stats')) AS t(kind, name)
    LOOP
        saved := nullif(current_setting('rlock_upgrade.' || lower(o.kind) ||
                                        '_' || translate(o.name, '()', ''),
                                        true), '')::aclitem[];
        CONTINUE WHEN saved IS NULL;    -- the defaults, as made
        IF o.kind = 'FUNCTION' THEN
            catalog := 'pg_catalog.pg_proc';
            target := o.name::regprocedure;
        ELSE
            catalog := 'pg_catalog.pg_class';
            target := o.name::regclass;
        END IF;
        SELECT initprivs INTO fresh FROM pg_catalog.pg_init_privs
        WHERE classoid = catalog AND objoid = target AND objsubid = 0;
        EXECUTE format('REVOKE ALL ON %s %s FROM PUBLIC', o.kind, o.name);
        -- the owner's grants first; then those a role passed on with its
        -- grant option, made again by that role, so that revoking its
        -- option (CASCADE) still takes them away
        FOR a IN SELECT e.*,
                        EXISTS (SELECT 1 FROM aclexplode(saved) g
                                WHERE g.grantee = e.grantor
                                  AND g.privilege_type = e.privilege_type
                                  AND g.is_grantable) AS passed_on
                 FROM aclexplode(saved) WITH ORDINALITY AS e
                 ORDER BY passed_on, ordinality
        LOOP
            IF a.passed_on THEN
                EXECUTE format('SET LOCAL ROLE %I', pg_get_userbyid(a.grantor));
            END IF;
            EXECUTE format('GRANT %s ON %s %s TO %s%s',
                           a.privilege_type, o.kind, o.name,
                           CASE a.grantee WHEN 0 THEN 'PUBLIC'
                           ELSE quote_ident(pg_get_userbyid(a.grantee)) END,
                           CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION'
                           ELSE '' END);
            IF a.passed_on THEN
                EXECUTE format('SET LOCAL ROLE %I', me);
            END IF;
        END LOOP;
        -- those grants are the user's, not the extension's own
        DELETE FROM pg_catalog.pg_init_privs
        WHERE classoid = catalog AND objoid = target AND objsubid = 0;
        IF fresh IS NOT NULL THEN
            INSERT INTO pg_catalog.pg_init_privs
            VALUES (target, catalog, 0, 'e', fresh);
        END IF;
        -- PostgreSQL 17 also records the roles initial privileges name
        -- (pg_shdepend, 'i'): the roles of the grants set again above
        -- are not among them, or they could never be dropped
        keep := '{}';
        IF cardinality(fresh) > 0 THEN
            keep := ARRAY(SELECT e.grantee FROM aclexplode(fresh) e
                          UNION SELECT e.grantor FROM aclexplode(fresh) e);
        END IF;
        DELETE FROM pg_catalog.pg_shdepend d
        WHERE d.dbid = (SELECT oid FROM pg_catalog.pg_database
                        WHERE datname = current_database())
          AND d.classid = catalog AND d.objid = target AND d.objsubid = 0
          AND d.deptype = 'i' AND d.refobjid <> ALL (keep);
    END LOOP;
END $$;
