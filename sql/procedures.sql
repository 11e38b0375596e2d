--
-- Procedures with transaction control: every COMMIT or ROLLBACK inside a
-- CALL ends the transaction-scoped holds taken before it.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS rlock;
RESET client_min_messages;

CREATE TABLE proc_log (step int, key text, held int, locked boolean);

CREATE PROCEDURE log_lock(step int, k text)
LANGUAGE sql AS $$
    INSERT INTO proc_log VALUES (step, k, rlock_held(k), rlock_is_locked(k))
$$;

CREATE PROCEDURE steps()
LANGUAGE plpgsql AS $$
DECLARE
    held_before_rollback int;
BEGIN
    PERFORM rlock_try('pr:x');
    PERFORM rlock_session_try('pr:s');
    CALL log_lock(1, 'pr:x');
    COMMIT;
    CALL log_lock(2, 'pr:x');
    COMMIT;
    PERFORM rlock_try('pr:x');
    held_before_rollback := rlock_held('pr:x');
    ROLLBACK;
    -- the rollback took the log row with it: record what was seen
    INSERT INTO proc_log VALUES (3, 'pr:x', held_before_rollback, NULL);
    CALL log_lock(4, 'pr:x');
    CALL log_lock(5, 'pr:s');
END $$;

CALL steps();
SELECT * FROM proc_log ORDER BY step;
-- the session-scoped hold outlived the procedure
SELECT rlock_held('pr:s'), rlock_is_locked('pr:s');
SELECT rlock_session_release('pr:s');

-- one lock per batch: each iteration commits and so releases its lock
CREATE TABLE batches (n int);
CREATE PROCEDURE run_batches(k text, n int)
LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1 .. n LOOP
        PERFORM rlock_lock(k);
        INSERT INTO batches VALUES (rlock_held(k));
        COMMIT;
    END LOOP;
END $$;
CALL run_batches('pr:batch', 3);
SELECT n, count(*) FROM batches GROUP BY n;
SELECT rlock_is_locked('pr:batch');

-- inside an explicit transaction block a procedure cannot commit, and its
-- locks last until the block ends
BEGIN;
CALL log_lock(6, 'pr:x');
SELECT rlock_try('pr:x');
CALL log_lock(7, 'pr:x');
COMMIT;
SELECT * FROM proc_log WHERE step >= 6 ORDER BY step;
SELECT rlock_is_locked('pr:x');
