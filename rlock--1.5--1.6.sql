/* rlock--1.5--1.6.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION rlock UPDATE TO '1.6'" to load this file. \quit

-- Shared locks: the plain kind taken as Redisson's read lock
-- (getReadWriteLock().readLock()), named as PostgreSQL's advisory
-- functions name their shared forms.  Taking them is for the roles a
-- superuser grants them to, as for the exclusive forms.
CREATE FUNCTION rlock_try_shared(key text, wait interval DEFAULT '0',
                                 lease interval DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rlock_try_shared'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_lock_shared(key text, lease interval DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'rlock_lock_shared'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_session_try_shared(key text, wait interval DEFAULT '0',
                                         lease interval DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rlock_session_try_shared'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_session_lock_shared(key text, lease interval DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'rlock_session_lock_shared'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION rlock_try_shared(text, interval, interval),
    rlock_lock_shared(text, interval),
    rlock_session_try_shared(text, interval, interval),
    rlock_session_lock_shared(text, interval) FROM PUBLIC;

CREATE FUNCTION rlock_release_shared(key text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rlock_release_shared'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_session_release_shared(key text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rlock_session_release_shared'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_held_shared(key text)
RETURNS integer
AS 'MODULE_PATHNAME', 'rlock_held_shared'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Fair locks: Redisson's fair lock (getFairLock), taken in the order of
-- the queue its clients and every rlock instance share.
CREATE FUNCTION rlock_try_fair(key text, wait interval DEFAULT '0',
                               lease interval DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rlock_try_fair'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_lock_fair(key text, lease interval DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'rlock_lock_fair'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_session_try_fair(key text, wait interval DEFAULT '0',
                                       lease interval DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rlock_session_try_fair'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_session_lock_fair(key text, lease interval DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'rlock_session_lock_fair'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION rlock_try_fair(text, interval, interval),
    rlock_lock_fair(text, interval),
    rlock_session_try_fair(text, interval, interval),
    rlock_session_lock_fair(text, interval) FROM PUBLIC;

CREATE FUNCTION rlock_release_fair(key text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rlock_release_fair'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_session_release_fair(key text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rlock_session_release_fair'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rlock_held_fair(key text)
RETURNS integer
AS 'MODULE_PATHNAME', 'rlock_held_fair'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- rlock_locks shows each row's mode ('exclusive' or 'shared'), after
-- the columns of 1.5, unchanged.  The grants made since the install on
-- what this script makes again are kept as rlock--1.4--1.5.sql keeps
-- them (see there).
SELECT set_config('rlock_upgrade.function_rlock_locks', coalesce(proacl::text, ''), true)
FROM pg_catalog.pg_proc WHERE oid = 'rlock_locks()'::regprocedure;
SELECT set_config('rlock_upgrade.table_rlock_locks', coalesce(relacl::text, ''), true)
FROM pg_catalog.pg_class WHERE oid = 'rlock_locks'::regclass;

DROP VIEW rlock_locks;
DROP FUNCTION rlock_locks();

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
    OUT wait_until timestamptz,
    OUT kind text,
    OUT mode text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'rlock_locks'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE VIEW rlock_locks AS SELECT * FROM rlock_locks();
GRANT SELECT ON rlock_locks TO PUBLIC;

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
        ('FUNCTION', 'rlock_locks()'),
        ('TABLE', 'rlock_locks')) AS t(kind, name)
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
