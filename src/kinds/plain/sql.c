/*-------------------------------------------------------------------------
 *
 * sql.c
 *		The plain kind's SQL functions: rlock_try, rlock_lock,
 *		rlock_release, their session-scoped and fenced forms, and the
 *		shared forms (rlock_try_shared, ...), which take the lock as
 *		Redisson's read lock does.
 *
 * They shape their arguments into a request (backend/backend.h does the
 * checks and the rest): a wait (absent for the *_lock forms, which wait
 * without limit under lock_timeout), a lease (NULL: the watchdog), and
 * whether a fencing token is wanted.  Runs in backends.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/kinds/plain/sql.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/timestamp.h"

#include "backend/backend.h"

PG_FUNCTION_INFO_V1(rlock_try);
PG_FUNCTION_INFO_V1(rlock_lock);
PG_FUNCTION_INFO_V1(rlock_release);
PG_FUNCTION_INFO_V1(rlock_session_try);
PG_FUNCTION_INFO_V1(rlock_session_lock);
PG_FUNCTION_INFO_V1(rlock_session_release);
PG_FUNCTION_INFO_V1(rlock_try_token);
PG_FUNCTION_INFO_V1(rlock_session_try_token);
PG_FUNCTION_INFO_V1(rlock_token);
PG_FUNCTION_INFO_V1(rlock_try_shared);
PG_FUNCTION_INFO_V1(rlock_lock_shared);
PG_FUNCTION_INFO_V1(rlock_release_shared);
PG_FUNCTION_INFO_V1(rlock_session_try_shared);
PG_FUNCTION_INFO_V1(rlock_session_lock_shared);
PG_FUNCTION_INFO_V1(rlock_session_release_shared);
PG_FUNCTION_INFO_V1(rlock_held_shared);

/*
 * A session that holds a key shared only cannot take it exclusively: the
 * exclusive hold would wait for the session's own shared one for ever
 * (Redisson has no upgrade either).  A session that holds it exclusively
 * too re-enters.
 */
static void
plain_check_upgrade(const RlockKey *key)
{
	if (rlock_held_count(RLOCK_KIND_PLAIN, RLOCK_MODE_SHARED, key->redis,
						 key->len) > 0 &&
		rlock_held_count(RLOCK_KIND_PLAIN, RLOCK_MODE_EXCLUSIVE, key->redis,
						 key->len) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_DEADLOCK_DETECTED),
				 errmsg("lock \"%s\" is held in shared mode by this session",
						key->sql),
				 errdetail("A shared lock cannot be upgraded: an exclusive lock would wait for this session's own shared hold."),
				 errhint("Release the shared hold first, or take the lock exclusively before taking it shared.")));
}

/*
 * Shared body of the acquiring functions, for a hold in "mode" (exclusive
 * or shared).  With "bounded", the wait comes
 * from argument 1 and the lease from argument 2; otherwise the wait has no
 * limit (lock_timeout applies) and the lease is argument 1.  With a token
 * wanted, *token receives it.
 */
static bool
plain_take(FunctionCallInfo fcinfo, int mode, bool session, bool bounded,
		   bool want_token, int64 *token)
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

	if (mode == RLOCK_MODE_EXCLUSIVE)
		plain_check_upgrade(&key);
	status = rlock_acquire(RLOCK_KIND_PLAIN, mode, key.redis, key.len,
						   session, wait_until, lease_ms, !bounded,
						   want_token, token);
	rlock_report_status(status, key.sql, strlen(key.sql));
	return status == RLOCK_STATUS_OK;
}

/*
 * Shared body of the releasing functions.
 */
static bool
plain_give(FunctionCallInfo fcinfo, int mode, bool session)
{
	RlockKey	key;
	RlockStatus status;
	bool		found;
	const char *shared = (mode == RLOCK_MODE_SHARED) ? "_shared" : "";

	rlock_arg_key(fcinfo, 0, &key);
	status = rlock_release_one(RLOCK_KIND_PLAIN, mode, key.redis, key.len,
							   session, &found);
	if (!found)
	{
		bool		other_scope = rlock_held_count(RLOCK_KIND_PLAIN, mode,
												key.redis, key.len) > 0;
		bool		other_mode = rlock_held_count(RLOCK_KIND_PLAIN, 1 - mode,
											   key.redis, key.len) > 0;

		ereport(WARNING,
				(errmsg("lock \"%s\" is not held in %s scope%s by this session",
						key.sql, session ? "session" : "transaction",
						mode == RLOCK_MODE_SHARED ? " in shared mode" : ""),
				 other_scope ?
				 errhint("It is held in %s scope; release it with %s%s().",
						 session ? "transaction" : "session",
						 session ? "rlock_release" : "rlock_session_release",
						 shared) :
				 other_mode ?
				 errhint("It is held in %s mode; release it with %s%s().",
						 mode == RLOCK_MODE_SHARED ? "exclusive" : "shared",
						 session ? "rlock_session_release" : "rlock_release",
						 mode == RLOCK_MODE_SHARED ? "" : "_shared") : 0));
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

Datum
rlock_try(PG_FUNCTION_ARGS)
{
	int64		token;

	PG_RETURN_BOOL(plain_take(fcinfo, RLOCK_MODE_EXCLUSIVE, false, true, false, &token));
}

Datum
rlock_session_try(PG_FUNCTION_ARGS)
{
	int64		token;

	PG_RETURN_BOOL(plain_take(fcinfo, RLOCK_MODE_EXCLUSIVE, true, true, false, &token));
}

Datum
rlock_lock(PG_FUNCTION_ARGS)
{
	int64		token;

	(void) plain_take(fcinfo, RLOCK_MODE_EXCLUSIVE, false, false, false,
					  &token);
	PG_RETURN_VOID();
}

Datum
rlock_session_lock(PG_FUNCTION_ARGS)
{
	int64		token;

	(void) plain_take(fcinfo, RLOCK_MODE_EXCLUSIVE, true, false, false,
					  &token);
	PG_RETURN_VOID();
}

/*
 * rlock_try with a fencing token: the token, or NULL when not acquired.
 */
Datum
rlock_try_token(PG_FUNCTION_ARGS)
{
	int64		token;

	if (!plain_take(fcinfo, RLOCK_MODE_EXCLUSIVE, false, true, true, &token))
		PG_RETURN_NULL();
	PG_RETURN_INT64(token);
}

Datum
rlock_session_try_token(PG_FUNCTION_ARGS)
{
	int64		token;

	if (!plain_take(fcinfo, RLOCK_MODE_EXCLUSIVE, true, true, true, &token))
		PG_RETURN_NULL();
	PG_RETURN_INT64(token);
}

/*
 * The fencing token of this session's hold on a key: NULL when the session
 * holds no lock on it (or lost it), or took it without a token.
 */
Datum
rlock_token(PG_FUNCTION_ARGS)
{
	RlockKey	key;
	int64		token;

	rlock_arg_key(fcinfo, 0, &key);
	token = rlock_held_token(RLOCK_KIND_PLAIN, RLOCK_MODE_EXCLUSIVE, key.redis,
							 key.len);
	if (token == 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(token);
}

Datum
rlock_release(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(plain_give(fcinfo, RLOCK_MODE_EXCLUSIVE, false));
}

Datum
rlock_session_release(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(plain_give(fcinfo, RLOCK_MODE_EXCLUSIVE, true));
}

/*
 * The shared forms: Redisson's read lock.  No fencing token: a reader
 * fences nothing.
 */
Datum
rlock_try_shared(PG_FUNCTION_ARGS)
{
	int64		token;

	PG_RETURN_BOOL(plain_take(fcinfo, RLOCK_MODE_SHARED, false, true, false,
							  &token));
}

Datum
rlock_session_try_shared(PG_FUNCTION_ARGS)
{
	int64		token;

	PG_RETURN_BOOL(plain_take(fcinfo, RLOCK_MODE_SHARED, true, true, false,
							  &token));
}

Datum
rlock_lock_shared(PG_FUNCTION_ARGS)
{
	int64		token;

	(void) plain_take(fcinfo, RLOCK_MODE_SHARED, false, false, false, &token);
	PG_RETURN_VOID();
}

Datum
rlock_session_lock_shared(PG_FUNCTION_ARGS)
{
	int64		token;

	(void) plain_take(fcinfo, RLOCK_MODE_SHARED, true, false, false, &token);
	PG_RETURN_VOID();
}

Datum
rlock_release_shared(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(plain_give(fcinfo, RLOCK_MODE_SHARED, false));
}

Datum
rlock_session_release_shared(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(plain_give(fcinfo, RLOCK_MODE_SHARED, true));
}

/*
 * How many shared holds this session has on a key, both scopes together,
 * as rlock_held() counts the exclusive ones.
 */
Datum
rlock_held_shared(PG_FUNCTION_ARGS)
{
	RlockKey	key;

	rlock_arg_key(fcinfo, 0, &key);
	PG_RETURN_INT32(rlock_held_count(RLOCK_KIND_PLAIN, RLOCK_MODE_SHARED,
									 key.redis, key.len));
}
