-- Retry a locked read-modify-write inside a procedure (PL/pgSQL).
--
-- Each attempt runs in a block with an exception handler: an error there
-- rolls back to the start of the block, which releases the locks the
-- attempt took, and the loop tries again after a short, growing pause:
--
--   55P03  lock_timeout ran out while rlock_lock() waited;
--   58030  Redis could not be reached in time.
--
-- The COMMIT must stay outside that block (PL/pgSQL allows no COMMIT in a
-- block with an exception handler), so a loss found by the check before
-- commit (40001) ends the CALL: the caller retries the CALL, as it would
-- any serialization failure.  The procedure must be called outside a
-- transaction block for its COMMIT to be allowed.

CREATE OR REPLACE PROCEDURE add_to_balance_with_retries(
    lock_key text, account int, amount int, tries int DEFAULT 10)
LANGUAGE plpgsql
AS $$
DECLARE
    attempt int := 0;
BEGIN
    LOOP
        attempt := attempt + 1;
        BEGIN
            PERFORM set_config('lock_timeout', '200ms', true);
            PERFORM rlock_lock(lock_key);
            UPDATE accounts SET balance = balance + amount WHERE id = account;
        EXCEPTION
            WHEN lock_not_available OR io_error THEN
                IF attempt >= tries THEN
                    RAISE;
                END IF;
                RAISE NOTICE 'attempt % failed with %; trying again',
                    attempt, SQLSTATE;
                PERFORM pg_sleep(0.05 * 2 ^ (attempt - 1) * (0.5 + random()));
                CONTINUE;
        END;
        COMMIT;             -- the check before commit: 40001 ends the CALL
        RETURN;
    END LOOP;
END
$$;
