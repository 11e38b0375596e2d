--
-- Fencing tokens: every acquisition that asks for one counts one more on
-- the lock's counter (Redisson's fenced lock), so tokens only grow.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS rlock;
RESET client_min_messages;

BEGIN;
SELECT rlock_try_token('tok:a') AS first \gset
SELECT rlock_token('tok:a') = :first AS current_token;
-- re-entry counts a new token too, and it becomes the current one
SELECT rlock_try_token('tok:a') > :first AS reentry_grows;
SELECT rlock_token('tok:a') > :first AS current_is_newest;
SELECT rlock_held('tok:a');
COMMIT;
-- no hold, no token
SELECT rlock_token('tok:a') IS NULL AS none_after_commit;

-- a later acquisition gets a larger token
SELECT rlock_try_token('tok:a') > :first AS later_is_larger;

-- a hold taken without a token has none
BEGIN;
SELECT rlock_try('tok:plain');
SELECT rlock_token('tok:plain') IS NULL AS plain_has_no_token;
COMMIT;

-- the token belongs to the hold that asked for it
SELECT rlock_session_try('tok:mixed');
SELECT rlock_session_try_token('tok:mixed') AS m1 \gset
SELECT rlock_session_try('tok:mixed');
SELECT rlock_token('tok:mixed') = :m1 AS newest_with_a_token;
SELECT rlock_session_release('tok:mixed');
SELECT rlock_token('tok:mixed') = :m1 AS still_held_with_it;
SELECT rlock_session_release('tok:mixed');
SELECT rlock_token('tok:mixed') IS NULL AS gone_with_its_hold;
SELECT rlock_held('tok:mixed');
SELECT rlock_session_release('tok:mixed');

-- session scope, with a wait and a lease
SELECT rlock_session_try_token('tok:s', '1 s', '1 min') AS s1 \gset
SELECT rlock_token('tok:s') = :s1 AS session_token;
SELECT rlock_session_release('tok:s');
SELECT rlock_token('tok:s') IS NULL AS none_after_release;

-- the pattern: a write guarded by the token in a version column
CREATE TABLE account (id int PRIMARY KEY, balance int, fence bigint);
INSERT INTO account VALUES (1, 100, 0);
BEGIN;
SELECT rlock_try_token('acct:1') IS NOT NULL AS locked;
UPDATE account SET balance = balance - 30, fence = rlock_token('acct:1')
WHERE id = 1 AND fence < rlock_token('acct:1');
COMMIT;
SELECT balance, fence > 0 AS fenced FROM account;
-- a writer holding no lock writes nothing: its token is NULL
UPDATE account SET balance = 0, fence = rlock_token('acct:1')
WHERE id = 1 AND fence < rlock_token('acct:1');
SELECT balance FROM account;

-- argument errors are those of rlock_try
SELECT rlock_try_token(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_session_try_token('tok:x', '-1 s');
\echo :LAST_ERROR_SQLSTATE
SELECT rlock_token('');
\echo :LAST_ERROR_SQLSTATE

-- the check before commit is on by default, with a margin of 2 s
SHOW rlock.verify_at_commit;
SHOW rlock.verify_margin;
BEGIN;
SET LOCAL rlock.verify_at_commit = off;
SET LOCAL rlock.verify_margin = '10s';
SELECT rlock_try('tok:off');
COMMIT;
-- (the message words the range with its unit from PostgreSQL 16 on)
SELECT min_val FROM pg_settings WHERE name = 'rlock.verify_margin';
\set VERBOSITY sqlstate
SET rlock.verify_margin = -1;
\set VERBOSITY default
\echo :LAST_ERROR_SQLSTATE
