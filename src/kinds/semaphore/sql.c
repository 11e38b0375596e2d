/*-------------------------------------------------------------------------
 *
 * sql.c
 *		The semaphore kind's SQL functions: taking and giving back
 *		permits (rlock_try_permits, rlock_acquire_permits,
 *		rlock_release_permits, their session-scoped forms), what this
 *		session holds (rlock_held_permits), and the semaphore's count
 *		(rlock_set_permits, rlock_add_permits, rlock_available_permits).
 *
 * Taking N permits is one hold of amount N on the name (backend/holds.c):
 * the end of the transaction (or session) gives them back as it gives
 * back locks, after the commit is visible.  Runs in backends.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/kinds/semaphore/sql.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"

#include "backend/backend.h"
#include "kinds/semaphore/semaphore.h"

PG_FUNCTION_INFO_V1(rlock_try_permits);
PG_FUNCTION_INFO_V1(rlock_acquire_permits);
PG_FUNCTION_INFO_V1(rlock_session_try_permits);
PG_FUNCTION_INFO_V1(rlock_session_acquire_permits);
PG_FUNCTION_INFO_V1(rlock_release_permits);
PG_FUNCTION_INFO_V1(rlock_session_release_permits);
PG_FUNCTION_INFO_V1(rlock_held_permits);
PG_FUNCTION_INFO_V1(rlock_set_permits);
PG_FUNCTION_INFO_V1(rlock_add_permits);
PG_FUNCTION_INFO_V1(rlock_available_permits);

/*
 * The number of permits in argument argno: NULL, zero and negative
 * numbers are refused.
 */
static int32
permits_arg(FunctionCallInfo fcinfo, int argno)
{
	int32		n;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("number of permits must not be null")));
	n = PG_GETARG_INT32(argno);
	if (n <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("number of permits must be greater than zero"),
				 errdetail("It was %d.", n)));
	return n;
}

/*
 * Take permits: (name, permits, wait, lease) when bounded, else (name,
 * permits, lease) with a wait without limit (lock_timeout applies).
 */
static bool
permits_take(FunctionCallInfo fcinfo, bool session, bool bounded)
{
	RlockKey	key;
	int32		permits;
	int32		held;
	TimestampTz wait_until = 0;
	int64		lease_ms;
	RlockStatus status;
	int64		token;

	rlock_arg_key(fcinfo, 0, &key);
	permits = permits_arg(fcinfo, 1);
	if (bounded)
		wait_until = rlock_arg_deadline(rlock_arg_interval_us(fcinfo, 2,
															  "wait", false,
															  true));
	lease_ms = rlock_arg_lease_ms(fcinfo, bounded ? 3 : 2);

	held = rlock_held_count(RLOCK_KIND_SEMAPHORE, 0, key.redis, key.len);
	if ((int64) held + permits > SEMAPHORE_MAX_PERMITS)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("too many permits of semaphore \"%s\" for one session",
						key.sql),
				 errdetail("This session holds %d and asks for %d; one session may hold at most %d permits of one semaphore.",
						   held, permits, SEMAPHORE_MAX_PERMITS)));

	status = rlock_acquire(RLOCK_KIND_SEMAPHORE, 0, key.redis, key.len,
						   session, permits, wait_until, lease_ms, !bounded,
						   false, &token);
	rlock_report_status(status, key.sql, strlen(key.sql));
	return status == RLOCK_STATUS_OK;
}

Datum
rlock_try_permits(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(permits_take(fcinfo, false, true));
}

Datum
rlock_session_try_permits(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(permits_take(fcinfo, true, true));
}

Datum
rlock_acquire_permits(PG_FUNCTION_ARGS)
{
	(void) permits_take(fcinfo, false, false);
	PG_RETURN_VOID();
}

Datum
rlock_session_acquire_permits(PG_FUNCTION_ARGS)
{
	(void) permits_take(fcinfo, true, false);
	PG_RETURN_VOID();
}

/*
 * Give back permits of one scope, the newest first.  A scope holding
 * fewer than asked gives back nothing, with a warning, and returns false,
 * as pg_advisory_unlock does for a lock it does not hold.
 */
static bool
permits_give(FunctionCallInfo fcinfo, bool session)
{
	RlockKey	key;
	int32		permits;
	RlockStatus status;
	bool		found;
	int32		scope;

	rlock_arg_key(fcinfo, 0, &key);
	permits = permits_arg(fcinfo, 1);
	scope = rlock_held_scope(RLOCK_KIND_SEMAPHORE, 0, key.redis, key.len,
							 session);
	if (scope < permits)
	{
		ereport(WARNING,
				(errmsg("semaphore \"%s\": %d permits are not held in %s scope by this session",
						key.sql, permits, session ? "session" : "transaction"),
				 errdetail("It holds %d in that scope.", scope),
				 errhint("rlock_held_permits() shows the permits held in both scopes.")));
		return false;
	}
	status = rlock_release_holds(RLOCK_KIND_SEMAPHORE, 0, key.redis, key.len,
								 session, permits, &found);
	if (status == RLOCK_STATUS_NOT_HELD)
	{
		ereport(WARNING,
				(errmsg("permits of semaphore \"%s\" were no longer held in Redis",
						key.sql),
				 errdetail("Their lease ran out, or they were removed, before this release."),
				 !session ?
				 errhint("The transaction will fail at commit.") : 0));
		return false;
	}
	rlock_report_status(status, key.sql, strlen(key.sql));
	return found;
}

Datum
rlock_release_permits(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(permits_give(fcinfo, false));
}

Datum
rlock_session_release_permits(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(permits_give(fcinfo, true));
}

/*
 * The permits this session holds on a semaphore, both scopes together.
 */
Datum
rlock_held_permits(PG_FUNCTION_ARGS)
{
	RlockKey	key;

	rlock_arg_key(fcinfo, 0, &key);
	PG_RETURN_INT32(rlock_held_count(RLOCK_KIND_SEMAPHORE, 0, key.redis,
									 key.len));
}

/*
 * rlock_set_permits(name, permits): set the number of permits of a
 * semaphore that has none set yet (Redisson's trySetPermits); true if
 * set.  Zero is allowed: a semaphore that exists with nothing available.
 */
Datum
rlock_set_permits(PG_FUNCTION_ARGS)
{
	RlockKey	key;
	int32		permits;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("number of permits must not be null")));
	permits = PG_GETARG_INT32(1);
	if (permits < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("number of permits must not be negative"),
				 errdetail("It was %d.", permits)));
	PG_RETURN_BOOL(rlock_key_call(fcinfo, RLOCK_KIND_SEMAPHORE,
								  SEMAPHORE_CALL_SET, permits, &key) == 1);
}

/*
 * rlock_add_permits(name, delta): add permits (a negative delta takes
 * them away, as Redisson's addPermits); returns the new available count.
 */
Datum
rlock_add_permits(PG_FUNCTION_ARGS)
{
	RlockKey	key;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("number of permits must not be null")));
	PG_RETURN_INT64(rlock_key_call(fcinfo, RLOCK_KIND_SEMAPHORE,
								   SEMAPHORE_CALL_ADD, PG_GETARG_INT32(1),
								   &key));
}

/*
 * rlock_available_permits(name): the permits available now, after those
 * whose lease ended went back to the pool.
 */
Datum
rlock_available_permits(PG_FUNCTION_ARGS)
{
	RlockKey	key;

	PG_RETURN_INT64(rlock_key_call(fcinfo, RLOCK_KIND_SEMAPHORE,
								   SEMAPHORE_CALL_AVAILABLE, 0, &key));
}
