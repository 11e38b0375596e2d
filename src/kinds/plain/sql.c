/*-------------------------------------------------------------------------
 *
 * sql.c
 *		The plain kind's SQL functions: rlock_try, rlock_lock,
 *		rlock_release and their session-scoped and fenced forms.
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

/*
 * Shared body of the acquiring functions.  With "bounded", the wait comes
 * from argument 1 and the lease from argument 2; otherwise the wait has no
 * limit (lock_timeout applies) and the lease is argument 1.  With a token
 * wanted, *token receives it.
 */
static bool
plain_take(FunctionCallInfo fcinfo, bool session, bool bounded,
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

	status = rlock_acquire(RLOCK_KIND_PLAIN, 0, key.redis, key.len, session,
						   wait_until, lease_ms, !bounded, want_token, token);
	rlock_report_status(status, key.sql, strlen(key.sql));
	return status == RLOCK_STATUS_OK;
}

/*
 * Shared body of the releasing functions.
 */
static bool
plain_give(FunctionCallInfo fcinfo, bool session)
{
	RlockKey	key;
	RlockStatus status;
	bool		found;

	rlock_arg_key(fcinfo, 0, &key);
	status = rlock_release_one(RLOCK_KIND_PLAIN, 0, key.redis, key.len,
							   session, &found);
	if (!found)
	{
		bool		other_scope = rlock_held_count(RLOCK_KIND_PLAIN, 0, key.redis,
												key.len) > 0;

		ereport(WARNING,
				(errmsg("lock \"%s\" is not held in %s scope by this session",
						key.sql, session ? "session" : "transaction"),
				 other_scope ?
				 errhint("It is held in %s scope; release it with %s.",
						 session ? "transaction" : "session",
						 session ? "rlock_release()" : "rlock_session_release()") : 0));
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

	PG_RETURN_BOOL(plain_take(fcinfo, false, true, false, &token));
}

Datum
rlock_session_try(PG_FUNCTION_ARGS)
{
	int64		token;

	PG_RETURN_BOOL(plain_take(fcinfo, true, true, false, &token));
}

Datum
rlock_lock(PG_FUNCTION_ARGS)
{
	int64		token;

	(void) plain_take(fcinfo, false, false, false, &token);
	PG_RETURN_VOID();
}

Datum
rlock_session_lock(PG_FUNCTION_ARGS)
{
	int64		token;

	(void) plain_take(fcinfo, true, false, false, &token);
	PG_RETURN_VOID();
}

/*
 * rlock_try with a fencing token: the token, or NULL when not acquired.
 */
Datum
rlock_try_token(PG_FUNCTION_ARGS)
{
	int64		token;

	if (!plain_take(fcinfo, false, true, true, &token))
		PG_RETURN_NULL();
	PG_RETURN_INT64(token);
}

Datum
rlock_session_try_token(PG_FUNCTION_ARGS)
{
	int64		token;

	if (!plain_take(fcinfo, true, true, true, &token))
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
	token = rlock_held_token(RLOCK_KIND_PLAIN, 0, key.redis, key.len);
	if (token == 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(token);
}

Datum
rlock_release(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(plain_give(fcinfo, false));
}

Datum
rlock_session_release(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(plain_give(fcinfo, true));
}
