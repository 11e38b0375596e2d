--
-- Savepoints and PL/pgSQL exception blocks: rolling back a subtransaction
-- releases the transaction-scoped holds taken in it.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS rlock;
RESET client_min_messages;

BEGIN;
SELECT rlock_try('sp:outer');
SAVEPOINT a;
SELECT rlock_try('sp:inner'), rlock_try('sp:outer');
SELECT rlock_held('sp:inner'), rlock_held('sp:outer');
ROLLBACK TO SAVEPOINT a;
-- the holds taken after the savepoint are gone, the earlier one stays
SELECT rlock_held('sp:inner'), rlock_held('sp:outer'),
       rlock_is_locked('sp:inner'), rlock_is_locked('sp:outer');

-- RELEASE SAVEPOINT hands holds to the enclosing transaction
SAVEPOINT b;
SELECT rlock_try('sp:kept');
RELEASE SAVEPOINT b;
SAVEPOINT c;
SELECT 1 / 0;
ROLLBACK TO SAVEPOINT c;
SELECT rlock_held('sp:kept'), rlock_held('sp:outer');

-- nested: released into the outer savepoint, then rolled back with it
SAVEPOINT d;
SAVEPOINT e;
SELECT rlock_try('sp:nested');
RELEASE SAVEPOINT e;
SELECT rlock_held('sp:nested');
ROLLBACK TO SAVEPOINT d;
SELECT rlock_held('sp:nested'), rlock_is_locked('sp:nested');

-- session-scoped holds taken in a savepoint survive its rollback
SAVEPOINT f;
SELECT rlock_session_try('sp:session');
ROLLBACK TO SAVEPOINT f;
SELECT rlock_held('sp:session');
COMMIT;
SELECT rlock_held('sp:outer'), rlock_held('sp:kept'),
       rlock_is_locked('sp:kept'), rlock_held('sp:session');
SELECT rlock_session_release('sp:session');

-- an exception caught in PL/pgSQL releases what its block took ...
CREATE FUNCTION take_then_fail(k text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    BEGIN
        PERFORM rlock_try(k);
        RAISE EXCEPTION 'failing with % held % time(s)', k, rlock_held(k);
    EXCEPTION WHEN raise_exception THEN
        RETURN SQLERRM || ', now held ' || rlock_held(k) || ' time(s)';
    END;
END $$;
BEGIN;
SELECT take_then_fail('sp:plpgsql');
SELECT rlock_is_locked('sp:plpgsql');
COMMIT;

-- ... but not what was taken before the block
CREATE FUNCTION take_outside_block(k text) RETURNS int
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM rlock_try(k);
    BEGIN
        PERFORM rlock_try(k);
        PERFORM 1 / 0;
    EXCEPTION WHEN division_by_zero THEN
        NULL;
    END;
    RETURN rlock_held(k);
END $$;
BEGIN;
SELECT take_outside_block('sp:before-block');
SELECT rlock_is_locked('sp:before-block');
COMMIT;
SELECT rlock_is_locked('sp:before-block');
