/*-------------------------------------------------------------------------
 *
 * sql.c
 *		The latch kind's SQL functions: rlock_latch_set,
 *		rlock_latch_count_down, rlock_latch_count, rlock_latch_delete and
 *		rlock_latch_wait.
 *
 * A wait is a session-scoped acquire of the latch kind, granted when the
 * count is zero, which is given back at once: it holds nothing, but waits
 * as a lock's wait does (woken by the latch's message, ended by its
 * bound, lock_timeout, statement_timeout or a cancel).  Runs in backends.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/kinds/latch/sql.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"

#include "rlock.h"
#include "backend/backend.h"
#include "kinds/latch/latch.h"

PG_FUNCTION_INFO_V1(rlock_latch_set);
PG_FUNCTION_INFO_V1(rlock_latch_count_down);
PG_FUNCTION_INFO_V1(rlock_latch_count);
PG_FUNCTION_INFO_V1(rlock_latch_delete);
PG_FUNCTION_INFO_V1(rlock_latch_wait);

/*
 * The latch's key: a lock key's checks, and in a Redis Cluster no brace
 * in the name, since Redisson braces the whole name in the latch's
 * channel, whose slot would then differ from the name's.
 */
static void
latch_key(FunctionCallInfo fcinfo, RlockKey *key)
{
	rlock_arg_key(fcinfo, 0, key);
	if (rlock_topology == RLOCK_TOPOLOGY_CLUSTER &&
		(memchr(key->redis, '{', key->len) != NULL ||
		 memchr(key->redis, '}', key->len) != NULL))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("latch \"%s\" cannot be used in a Redis Cluster",
						key->sql),
				 errdetail("Its channel, which Redisson names by putting the whole name in braces, hashes to another slot than the name."),
				 errhint("Use a name without braces.")));
}

/*
 * Run one of the latch's calls on the name in argument 0.
 */
static int64
latch_call(FunctionCallInfo fcinfo, int which, int64 arg)
{
	RlockKey	key;

	latch_key(fcinfo, &key);
	return rlock_key_call(fcinfo, RLOCK_KIND_LATCH, which, arg, &key);
}

/*
 * rlock_latch_set(name, count): set the count of a latch that has none
 * (Redisson's trySetCount); true if set.
 */
Datum
rlock_latch_set(PG_FUNCTION_ARGS)
{
	int64		count;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("latch count must not be null")));
	count = PG_GETARG_INT64(1);
	if (count <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("latch count must be greater than zero"),
				 errdetail("It was " INT64_FORMAT ".", count)));
	if (count > LATCH_MAX_COUNT)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("latch count must be at most " INT64_FORMAT,
						LATCH_MAX_COUNT),
				 errdetail("It was " INT64_FORMAT "; Redis's scripts count in doubles, which hold integers exactly only below 2^53.",
						   count)));
	PG_RETURN_BOOL(latch_call(fcinfo, LATCH_CALL_SET, count) == 1);
}

/*
 * rlock_latch_count_down(name): the count left (0: the latch opened, or
 * there was none).
 */
Datum
rlock_latch_count_down(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT64(latch_call(fcinfo, LATCH_CALL_COUNT_DOWN, 0));
}

Datum
rlock_latch_count(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT64(latch_call(fcinfo, LATCH_CALL_COUNT, 0));
}

Datum
rlock_latch_delete(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(latch_call(fcinfo, LATCH_CALL_DELETE, 0) == 1);
}

/*
 * rlock_latch_wait(name, wait): true once the count is zero (or there is
 * no latch), false if the wait ran out first; a NULL wait has no limit
 * (lock_timeout applies).
 */
Datum
rlock_latch_wait(PG_FUNCTION_ARGS)
{
	RlockKey	key;
	int64		us;
	RlockStatus status;
	int64		token;

	latch_key(fcinfo, &key);
	us = rlock_arg_interval_us(fcinfo, 1, "wait", true, true);
	status = rlock_acquire(RLOCK_KIND_LATCH, 0, key.redis, key.len, true, 1,
						   us < 0 ? 0 : rlock_arg_deadline(us), 0, us < 0,
						   false, &token);
	if (status == RLOCK_STATUS_OK)
		(void) rlock_release_nowait(RLOCK_KIND_LATCH, 0, key.redis, key.len,
									true);
	rlock_report_status(status, key.sql, strlen(key.sql));
	PG_RETURN_BOOL(status == RLOCK_STATUS_OK);
}
