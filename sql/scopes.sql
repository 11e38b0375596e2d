--
-- Transaction and session scope, mirroring advisory locks.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS rlock;
RESET client_min_messages;

-- transaction-scoped holds end at COMMIT ...
BEGIN;
SELECT rlock_try('sc:x');
COMMIT;
SELECT rlock_held('sc:x'), rlock_is_locked('sc:x');
-- ... at ROLLBACK ...
BEGIN;
SELECT rlock_try('sc:x');
ROLLBACK;
SELECT rlock_held('sc:x'), rlock_is_locked('sc:x');
-- ... and when the transaction fails
BEGIN;
SELECT rlock_try('sc:x');
SELECT 1 / 0;
ROLLBACK;
SELECT rlock_held('sc:x'), rlock_is_locked('sc:x');

-- session-scoped holds ignore ROLLBACK
BEGIN;
SELECT rlock_session_try('sc:s');
ROLLBACK;
SELECT rlock_held('sc:s'), rlock_is_locked('sc:s');
-- and so does their release
BEGIN;
SELECT rlock_session_release('sc:s');
ROLLBACK;
SELECT rlock_held('sc:s'), rlock_is_locked('sc:s');

-- both scopes on one key stack; each scope ends its own holds
BEGIN;
SELECT rlock_session_try('sc:both'), rlock_try('sc:both');
SELECT rlock_held('sc:both');
COMMIT;
SELECT rlock_held('sc:both'), rlock_is_locked('sc:both');
SELECT rlock_session_release('sc:both');
SELECT rlock_held('sc:both'), rlock_is_locked('sc:both');

-- a transaction hold can be released early
BEGIN;
SELECT rlock_try('sc:early'), rlock_try('sc:early');
SELECT rlock_release('sc:early');
SELECT rlock_held('sc:early'), rlock_is_locked('sc:early');
SELECT rlock_release('sc:early');
SELECT rlock_held('sc:early'), rlock_is_locked('sc:early');
COMMIT;

-- rlock_release_all leaves transaction holds alone
BEGIN;
SELECT rlock_try('sc:t'), rlock_session_try('sc:u');
SELECT rlock_release_all();
SELECT rlock_held('sc:t'), rlock_held('sc:u');
COMMIT;
SELECT rlock_is_locked('sc:t'), rlock_is_locked('sc:u');

-- a lock this session holds is re-entered at once, whatever the wait
BEGIN;
SELECT rlock_try('sc:mine');
SELECT rlock_try('sc:mine', '0'), rlock_try('sc:mine', '1 hour');
SELECT rlock_held('sc:mine');
COMMIT;

-- a read-only transaction can take locks: they write nothing to the
-- database
BEGIN READ ONLY;
SELECT rlock_try('sc:read-only');
COMMIT;
