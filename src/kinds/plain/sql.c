/*-------------------------------------------------------------------------
 *
 * sql.c
 *		The plain kind's SQL functions: rlock_try, rlock_lock,
 *		rlock_release, their session-scoped and fenced forms, and the
 *		shared forms (rlock_try_shared, ...), which take the lock as
 *		Redisson's read lock does.
 *
 * They shape their arguments into a call of backend/calls.c, which does
 * the checks and the rest: the mode, the scope, a wait (absent for the
 * *_lock forms, which wait without limit under lock_timeout), a lease
 * (NULL: the watchdog), and whether a fencing token is wanted.  Runs in
 * backends.
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

/* the calls of backend/calls.c, for this kind */
#define TAKE(mode, session, bounded, want_token) \
	rlock_call_take(fcinfo, RLOCK_KIND_PLAIN, (mode), (session), (bounded), \
					(want_token), &token)
#define EXCLUSIVE	RLOCK_MODE_EXCLUSIVE
#define SHARED		RLOCK_MODE_SHARED

Datum
rlock_try(PG_FUNCTION_ARGS)
{
	int64		token;

	PG_RETURN_BOOL(TAKE(EXCLUSIVE, false, true, false));
}

Datum
rlock_session_try(PG_FUNCTION_ARGS)
{
	int64		token;

	PG_RETURN_BOOL(TAKE(EXCLUSIVE, true, true, false));
}

Datum
rlock_lock(PG_FUNCTION_ARGS)
{
	int64		token;

	(void) TAKE(EXCLUSIVE, false, false, false);
	PG_RETURN_VOID();
}

Datum
rlock_session_lock(PG_FUNCTION_ARGS)
{
	int64		token;

	(void) TAKE(EXCLUSIVE, true, false, false);
	PG_RETURN_VOID();
}

/*
 * rlock_try with a fencing token: the token, or NULL when not acquired.
 */
Datum
rlock_try_token(PG_FUNCTION_ARGS)
{
	int64		token;

	if (!TAKE(EXCLUSIVE, false, true, true))
		PG_RETURN_NULL();
	PG_RETURN_INT64(token);
}

Datum
rlock_session_try_token(PG_FUNCTION_ARGS)
{
	int64		token;

	if (!TAKE(EXCLUSIVE, true, true, true))
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
	token = rlock_held_token(RLOCK_KIND_PLAIN, EXCLUSIVE, key.redis, key.len);
	if (token == 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(token);
}

Datum
rlock_release(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(rlock_call_give(fcinfo, RLOCK_KIND_PLAIN, EXCLUSIVE, false,
								   "", "_shared"));
}

Datum
rlock_session_release(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(rlock_call_give(fcinfo, RLOCK_KIND_PLAIN, EXCLUSIVE, true,
								   "", "_shared"));
}

/*
 * The shared forms: Redisson's read lock.  No fencing token: a reader
 * fences nothing.
 */
Datum
rlock_try_shared(PG_FUNCTION_ARGS)
{
	int64		token;

	PG_RETURN_BOOL(TAKE(SHARED, false, true, false));
}

Datum
rlock_session_try_shared(PG_FUNCTION_ARGS)
{
	int64		token;

	PG_RETURN_BOOL(TAKE(SHARED, true, true, false));
}

Datum
rlock_lock_shared(PG_FUNCTION_ARGS)
{
	int64		token;

	(void) TAKE(SHARED, false, false, false);
	PG_RETURN_VOID();
}

Datum
rlock_session_lock_shared(PG_FUNCTION_ARGS)
{
	int64		token;

	(void) TAKE(SHARED, true, false, false);
	PG_RETURN_VOID();
}

Datum
rlock_release_shared(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(rlock_call_give(fcinfo, RLOCK_KIND_PLAIN, SHARED, false,
								   "_shared", ""));
}

Datum
rlock_session_release_shared(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(rlock_call_give(fcinfo, RLOCK_KIND_PLAIN, SHARED, true,
								   "_shared", ""));
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
	PG_RETURN_INT32(rlock_held_count(RLOCK_KIND_PLAIN, SHARED, key.redis,
									 key.len));
}
