/*-------------------------------------------------------------------------
 *
 * sql.c
 *		The fair kind's SQL functions: rlock_try_fair, rlock_lock_fair,
 *		rlock_release_fair, their session-scoped forms and
 *		rlock_held_fair.
 *
 * They shape their arguments into a call of backend/calls.c, as the
 * plain kind's do.  Runs in backends.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/kinds/fair/sql.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"

#include "backend/backend.h"

PG_FUNCTION_INFO_V1(rlock_try_fair);
PG_FUNCTION_INFO_V1(rlock_lock_fair);
PG_FUNCTION_INFO_V1(rlock_release_fair);
PG_FUNCTION_INFO_V1(rlock_session_try_fair);
PG_FUNCTION_INFO_V1(rlock_session_lock_fair);
PG_FUNCTION_INFO_V1(rlock_session_release_fair);
PG_FUNCTION_INFO_V1(rlock_held_fair);

/* the calls of backend/calls.c, for this kind */
#define TAKE(session, bounded) \
	rlock_call_take(fcinfo, RLOCK_KIND_FAIR, RLOCK_MODE_EXCLUSIVE, \
					(session), (bounded), false, &token)
#define GIVE(session) \
	rlock_call_give(fcinfo, RLOCK_KIND_FAIR, RLOCK_MODE_EXCLUSIVE, \
					(session), "_fair", NULL)

Datum
rlock_try_fair(PG_FUNCTION_ARGS)
{
	int64		token;

	PG_RETURN_BOOL(TAKE(false, true));
}

Datum
rlock_session_try_fair(PG_FUNCTION_ARGS)
{
	int64		token;

	PG_RETURN_BOOL(TAKE(true, true));
}

Datum
rlock_lock_fair(PG_FUNCTION_ARGS)
{
	int64		token;

	(void) TAKE(false, false);
	PG_RETURN_VOID();
}

Datum
rlock_session_lock_fair(PG_FUNCTION_ARGS)
{
	int64		token;

	(void) TAKE(true, false);
	PG_RETURN_VOID();
}

Datum
rlock_release_fair(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(GIVE(false));
}

Datum
rlock_session_release_fair(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(GIVE(true));
}

/*
 * How many fair holds this session has on a key, both scopes together.
 */
Datum
rlock_held_fair(PG_FUNCTION_ARGS)
{
	RlockKey	key;

	rlock_arg_key(fcinfo, 0, &key);
	PG_RETURN_INT32(rlock_held_count(RLOCK_KIND_FAIR, RLOCK_MODE_EXCLUSIVE,
									 key.redis, key.len));
}
