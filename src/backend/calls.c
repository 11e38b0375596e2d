/*-------------------------------------------------------------------------
 *
 * calls.c
 *		The bodies of the kinds' SQL functions that take and give back
 *		locks: arguments, the checks between a session's holds of one
 *		key, and what is said when a release finds nothing to give back.
 *
 * A kind's sql.c shapes its functions' arguments into a call here: which
 * kind and mode, which scope, whether the wait is bounded (argument 1) or
 * not (lock_timeout applies), and the suffix of its functions' names
 * ("_shared", "_fair"), which messages name.
 *
 * A session's holds of one key are of one kind of Redisson's family
 * (RLOCK_KIND_IN_FAMILY): the plain kind's exclusive and shared holds are
 * the hash fields of one owner, and a fair hold would be the same field
 * as an exclusive one.  So a key held in one is refused in another
 * (55000).  A key held shared only may be asked exclusively: an upgrade,
 * granted when the session is the lock's only holder, else waited for
 * like any exclusive lock, as pg_advisory_xact_lock waits after
 * pg_advisory_xact_lock_shared.  Two sessions that share a lock and both
 * upgrade wait for each other: the deadlock search ends that (Redisson
 * has no upgrade at all).  A set does not upgrade its members.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/backend/calls.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/timestamp.h"

#include "rlock.h"
#include "backend/backend.h"

/* how many holds of "key" this session has in "kind", every mode */
static int
calls_held_in(RlockKind kind, const RlockKey *key)
{
	return rlock_held_count(kind, RLOCK_MODE_EXCLUSIVE, key->redis,
							key->len) +
		rlock_held_count(kind, RLOCK_MODE_SHARED, key->redis, key->len);
}

/*
 * May this session take "key" in "kind" and "mode" with what it holds?
 * Raises if not.  True when the call would be an upgrade: "key" asked
 * exclusively by a session that holds it shared only (holds.c tells the
 * worker so).
 */
bool
rlock_call_check(RlockKind kind, int mode, const RlockKey *key)
{
	RlockKind	other;

	for (other = 0; other < RLOCK_NKINDS; other++)
	{
		if (other != kind && RLOCK_KIND_IN_FAMILY(kind) &&
			RLOCK_KIND_IN_FAMILY(other) && calls_held_in(other, key) > 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("lock \"%s\" is held by this session as a %s lock",
							key->sql, rlock_kind_names[other]),
					 errdetail("A session holds a key in one kind of lock at a time."),
					 errhint("Release it first.")));
	}
	return mode == RLOCK_MODE_EXCLUSIVE &&
		rlock_held_count(kind, RLOCK_MODE_SHARED, key->redis, key->len) > 0 &&
		rlock_held_count(kind, RLOCK_MODE_EXCLUSIVE, key->redis,
						 key->len) == 0;
}

/*
 * A set's member this session holds shared only: sets take their members
 * exclusively without upgrading.
 */
void
rlock_call_refuse_upgrade(const RlockKey *key)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("lock \"%s\" is held in shared mode by this session",
					key->sql),
			 errdetail("A set does not upgrade its members' shared holds."),
			 errhint("Take the key alone with rlock_try, or release the shared hold first.")));
}

/*
 * Take one hold.  With "bounded", the wait comes from argument 1 and the
 * lease from argument 2; otherwise the wait has no limit (lock_timeout
 * applies) and the lease is argument 1.  With a token wanted, *token
 * receives it.  True when taken.
 */
bool
rlock_call_take(FunctionCallInfo fcinfo, RlockKind kind, int mode,
				bool session, bool bounded, bool want_token, int64 *token)
{
	RlockKey	key;
	TimestampTz wait_until;
	int64		lease_ms;
	RlockStatus status;

	rlock_arg_key(fcinfo, 0, &key);
	if (bounded)
	{
		wait_until = rlock_arg_deadline(rlock_arg_interval_us(fcinfo, 1,
															  "wait", false,
															  true));
		lease_ms = rlock_arg_lease_ms(fcinfo, 2);
	}
	else
	{
		wait_until = 0;
		lease_ms = rlock_arg_lease_ms(fcinfo, 1);
	}

	(void) rlock_call_check(kind, mode, &key);
	status = rlock_acquire(kind, mode, key.redis, key.len, session, 1,
						   wait_until, lease_ms, !bounded, want_token, token);
	rlock_report_status(status, key.sql, strlen(key.sql));
	return status == RLOCK_STATUS_OK;
}

/*
 * Give back the newest hold of one scope.  "suffix" ends the names of
 * the kind and mode's functions ("", "_shared", "_fair"), "other" those
 * of the kind's other mode (NULL: none), for the hints.  True when given
 * back; a warning says why not.
 */
bool
rlock_call_give(FunctionCallInfo fcinfo, RlockKind kind, int mode,
				bool session, const char *suffix, const char *other)
{
	RlockKey	key;
	RlockStatus status;
	bool		found;

	rlock_arg_key(fcinfo, 0, &key);
	status = rlock_release_holds(kind, mode, key.redis, key.len, session, 1,
								 &found);
	if (!found)
	{
		bool		other_scope = rlock_held_count(kind, mode, key.redis,
												key.len) > 0;
		bool		other_mode = other != NULL &&
			rlock_held_count(kind, 1 - mode, key.redis, key.len) > 0;

		ereport(WARNING,
				(errmsg("lock \"%s\" is not held in %s scope%s by this session",
						key.sql, session ? "session" : "transaction",
						mode == RLOCK_MODE_SHARED ? " in shared mode" : ""),
				 other_scope ?
				 errhint("It is held in %s scope; release it with %s%s().",
						 session ? "transaction" : "session",
						 session ? "rlock_release" : "rlock_session_release",
						 suffix) :
				 other_mode ?
				 errhint("It is held in %s mode; release it with %s%s().",
						 mode == RLOCK_MODE_SHARED ? "exclusive" : "shared",
						 session ? "rlock_session_release" : "rlock_release",
						 other) : 0));
		return false;
	}
	if (status == RLOCK_STATUS_NOT_HELD)
	{
		ereport(WARNING,
				(errmsg("lock \"%s\" was no longer held in Redis", key.sql),
				 errdetail("Its lease ran out or it was removed before this release."),
				 (!session && rlock_verify_at_commit) ?
				 errhint("The transaction will fail at commit.") : 0));
		return false;
	}
	rlock_report_status(status, key.sql, strlen(key.sql));
	return true;
}
