/*-------------------------------------------------------------------------
 *
 * multi.c
 *		Sets of plain locks taken all or none in one call: rlock_try_set,
 *		rlock_lock_set, rlock_release_set and their session-scoped forms.
 *
 * A set's members are ordinary holds of the plain kind, each key
 * exclusively (Redisson's RLock) or shared (its read lock), so a set
 * excludes whatever takes those names one by one: another session's
 * rlock_try, a Java RLock, a RedissonMultiLock over them.  Nothing in
 * Redis marks them as a set; a release, a transaction's end or a
 * savepoint's rollback gives each back as it would give back a single
 * hold.
 *
 * The members are sorted by their key's bytes in Redis (rlock.key_prefix
 * included), one order for every session and instance, and taken in
 * rounds:
 *
 * - the first round tries each member in that order without waiting;
 * - when one is busy, what the call has taken so far is given back and
 *   that member becomes the anchor.  The next round waits for the anchor
 *   alone, then takes the members after it in order, waiting for each,
 *   and last the members before it, without waiting;
 * - one of those before it that is busy becomes the next anchor, earlier
 *   in the order than the last one; a member after the anchor that stays
 *   busy until the wait runs out ends the call.
 *
 * The first round goes to Redis as one command (rlock_acquire_set, the
 * kind's acquire_set.lua) when the set has 2 to RLOCK_SET_MAX_KEYS
 * exclusive members, none held by the session: all taken, or none and
 * the busy one named, which becomes the anchor as it would member by
 * member.  The worker declines sets of several slots of a Redis Cluster,
 * and a command that went unanswered or failed; those are tried one by
 * one.
 *
 * No deadlock between sets: a call waits either holding nothing of its
 * set (for the anchor) or holding only members ordered before the one it
 * waits for.  In a cycle of sessions each waiting for a key the next one
 * holds, each key waited for would come before the key the next session
 * waits for, all around the cycle: impossible.  (Holds a session took
 * before the call, by any function, are outside this order, as they are
 * for locks taken one by one.)
 *
 * No livelock: each anchor comes earlier in the order than the last, so a
 * call makes at most one round more than it has members before it holds
 * the set or its wait runs out, whatever the other sessions do.
 *
 * When a call fails it gives back only the holds it added: a member the
 * session held before keeps the holds it had.  On an error or a cancel
 * (lock_timeout, statement_timeout) those holds are given back before the
 * error goes on: nothing of a set outlives a failed call, in either
 * scope.
 *
 * Runs in backends.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/kinds/plain/multi.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/timestamp.h"

#include "rlock.h"
#include "backend/backend.h"

PG_FUNCTION_INFO_V1(rlock_try_set);
PG_FUNCTION_INFO_V1(rlock_lock_set);
PG_FUNCTION_INFO_V1(rlock_release_set);
PG_FUNCTION_INFO_V1(rlock_session_try_set);
PG_FUNCTION_INFO_V1(rlock_session_lock_set);
PG_FUNCTION_INFO_V1(rlock_session_release_set);

/* One key of a set, in its mode */
typedef struct SetMember
{
	RlockKey	key;
	int			mode;			/* RLOCK_MODE_EXCLUSIVE or _SHARED */
	bool		taken;			/* a hold this call added */
} SetMember;

/* Sort order: the key's bytes in Redis, then its length */
static int
multi_member_cmp(const void *a, const void *b)
{
	const SetMember *ma = (const SetMember *) a;
	const SetMember *mb = (const SetMember *) b;
	int			cmp;

	cmp = memcmp(ma->key.redis, mb->key.redis,
				 Min(ma->key.len, mb->key.len));
	if (cmp != 0)
		return cmp;
	if (ma->key.len != mb->key.len)
		return ma->key.len < mb->key.len ? -1 : 1;
	return ma->mode - mb->mode;
}

/* Array argument "argno" (named "what" in messages); NULL is refused */
static ArrayType *
multi_arg_keys(FunctionCallInfo fcinfo, int argno, const char *what)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", what)));
	return PG_GETARG_ARRAYTYPE_P(argno);
}

/*
 * Add the keys of "keys" (named "what" in messages) to members[*n], in
 * "mode".  A null key is refused.
 */
static void
multi_add_keys(ArrayType *keys, const char *what, int mode,
			   SetMember *members, int *n)
{
	Datum	   *elems;
	bool	   *nulls;
	int			nelems;
	int			i;

	deconstruct_array(keys, TEXTOID, -1, false, TYPALIGN_INT,
					  &elems, &nulls, &nelems);
	for (i = 0; i < nelems; i++)
	{
		SetMember  *m = &members[(*n)++];

		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("lock key must not be null"),
					 errdetail("Element %d of %s is null.", i + 1, what)));
		rlock_text_key(DatumGetTextPP(elems[i]), &m->key);
		m->mode = mode;
		m->taken = false;
	}
}

/* How many elements an array has */
static int
multi_nelems(ArrayType *a)
{
	return ArrayGetNItems(ARR_NDIM(a), ARR_DIMS(a));
}

/*
 * The set named by argument 0 (exclusive keys) and argument
 * "shared_argno" (shared keys), checked, sorted and without duplicates;
 * *n receives its size.
 */
static SetMember *
multi_members(FunctionCallInfo fcinfo, int shared_argno, int *n)
{
	ArrayType  *exclusive;
	ArrayType  *shared;
	SetMember  *members;
	int			i;
	int			keep = 0;

	rlock_check_key_call();
	exclusive = multi_arg_keys(fcinfo, 0, "keys");
	shared = multi_arg_keys(fcinfo, shared_argno, "shared_keys");
	members = palloc(sizeof(SetMember) *
					 Max(multi_nelems(exclusive) + multi_nelems(shared), 1));
	*n = 0;
	multi_add_keys(exclusive, "keys", RLOCK_MODE_EXCLUSIVE, members, n);
	multi_add_keys(shared, "shared_keys", RLOCK_MODE_SHARED, members, n);

	qsort(members, *n, sizeof(SetMember), multi_member_cmp);
	for (i = 0; i < *n; i++)
	{
		SetMember  *prev = keep > 0 ? &members[keep - 1] : NULL;

		if (prev != NULL && prev->key.len == members[i].key.len &&
			memcmp(prev->key.redis, members[i].key.redis,
				   prev->key.len) == 0)
		{
			if (prev->mode != members[i].mode)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("lock \"%s\" is named both in keys and in shared_keys",
								members[i].key.sql),
						 errdetail("A set takes each key in one mode.")));
			continue;
		}
		members[keep++] = members[i];
	}
	*n = keep;

	/* each member needs an entry of the session's own */
	if (*n > rlock_max_locks_per_session)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("lock set has too many keys"),
				 errdetail("The set names %d keys; a session may hold or take at most %d (rlock.max_locks_per_session).",
						   *n, rlock_max_locks_per_session),
				 errhint("Take fewer keys at once, or ask a superuser to raise rlock.max_locks_per_session.")));
	return members;
}

/*
 * Take one member: without waiting, or with "wait" until wait_until (0:
 * without limit, lock_timeout applying).  True when taken; an error
 * status is raised.  The one place a set takes a hold.
 */
static bool
multi_take_one(SetMember *m, bool session, bool wait, TimestampTz wait_until,
			   int64 lease_ms)
{
	RlockStatus status;
	int64		token;

	Assert(!m->taken);
	status = rlock_acquire(RLOCK_KIND_PLAIN, m->mode, m->key.redis,
						   m->key.len, session, 1,
						   wait ? wait_until : GetCurrentTimestamp(),
						   lease_ms, wait && wait_until == 0, false, &token);
	rlock_report_status(status, m->key.sql, strlen(m->key.sql));
	m->taken = (status == RLOCK_STATUS_OK);
	return m->taken;
}

/*
 * Give back the holds this call added, without waiting for Redis (the
 * worker sends the releases ahead of the session's next request).  Never
 * raises: it runs in the error path too.
 */
static void
multi_give_back(SetMember *members, int n, bool session)
{
	int			i;

	for (i = 0; i < n; i++)
	{
		if (!members[i].taken)
			continue;
		(void) rlock_release_nowait(RLOCK_KIND_PLAIN, members[i].mode,
									members[i].key.redis, members[i].key.len,
									session);
		members[i].taken = false;
	}
}

/*
 * The first round in one command, for a set of exclusive keys none of
 * which the session holds (rlock_acquire_set says which sets it serves).
 * True when it was so tried: then *busy is -1 when every member is held,
 * or the member that was busy, and nothing of the set is held.  An error
 * status is raised.
 */
static bool
multi_take_at_once(SetMember *members, int n, bool session, int64 lease_ms,
				   int *busy)
{
	RlockKeyRef keys[RLOCK_SET_MAX_KEYS];
	RlockStatus status;
	int			i;

	if (n > RLOCK_SET_MAX_KEYS)
		return false;
	for (i = 0; i < n; i++)
	{
		if (members[i].mode != RLOCK_MODE_EXCLUSIVE)
			return false;
		keys[i].data = members[i].key.redis;
		keys[i].len = members[i].key.len;
	}
	*busy = -1;
	status = rlock_acquire_set(RLOCK_KIND_PLAIN, keys, n, session, lease_ms,
							   busy);
	if (status == RLOCK_STATUS_DECLINED)
		return false;
	rlock_report_status(status, NULL, 0);
	Assert(status == RLOCK_STATUS_OK || status == RLOCK_STATUS_BUSY);
	if (status == RLOCK_STATUS_OK)
	{
		for (i = 0; i < n; i++)
			members[i].taken = true;
	}
	else if (*busy < 0 || *busy >= n)
		elog(ERROR, "rlock: a set's busy member %d is out of range", *busy);
	return true;
}

/*
 * The rounds of the file header.  True when every member is held; false
 * when the wait ran out, with what this call took still held.  The first
 * round goes in one command when it can (multi_take_at_once), and ends
 * as the member by member one would.
 */
static bool
multi_take_rounds(SetMember *members, int n, bool session,
				  TimestampTz wait_until, int64 lease_ms)
{
	int			anchor = -1;

	if (multi_take_at_once(members, n, session, lease_ms, &anchor) &&
		anchor < 0)
		return true;
	for (;;)
	{
		int			busy = -1;
		int			i;

		if (anchor >= 0)
		{
			if (wait_until != 0 && GetCurrentTimestamp() >= wait_until)
				return false;
			if (!multi_take_one(&members[anchor], session, true, wait_until,
								lease_ms))
				return false;
		}
		/* after the anchor, in order: waiting, unless in the first round */
		for (i = anchor + 1; i < n && busy < 0; i++)
		{
			if (!multi_take_one(&members[i], session, anchor >= 0,
								wait_until, lease_ms))
			{
				if (anchor >= 0)
					return false;
				busy = i;
			}
		}
		/* before the anchor: never waiting while holding a later one */
		for (i = 0; i < anchor && busy < 0; i++)
		{
			if (!multi_take_one(&members[i], session, false, wait_until,
								lease_ms))
				busy = i;
		}
		if (busy < 0)
			return true;
		Assert(anchor < 0 || busy < anchor);
		multi_give_back(members, n, session);
		anchor = busy;
	}
}

/*
 * The body of the functions that take a set.  With "bounded", the wait is
 * argument 1, the lease argument 2 and the shared keys argument 3;
 * otherwise the wait has no limit, the lease is argument 1 and the shared
 * keys argument 2.  True when the whole set is held; when not, nothing
 * this call took is.
 */
static bool
multi_take(FunctionCallInfo fcinfo, bool session, bool bounded)
{
	SetMember  *members;
	int			n;
	TimestampTz wait_until;
	int64		lease_ms;
	volatile bool held = false;
	int			i;

	members = multi_members(fcinfo, bounded ? 3 : 2, &n);
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
	for (i = 0; i < n; i++)
	{
		if (rlock_call_check(RLOCK_KIND_PLAIN, members[i].mode,
							 &members[i].key))
			rlock_call_refuse_upgrade(&members[i].key);
	}

	PG_TRY();
	{
		held = multi_take_rounds(members, n, session, wait_until, lease_ms);
	}
	PG_CATCH();
	{
		multi_give_back(members, n, session);
		PG_RE_THROW();
	}
	PG_END_TRY();

	if (!held)
		multi_give_back(members, n, session);
	return held;
}

/*
 * Give back the newest hold of the scope on one member of a set and say
 * what rlock_release says when there is none.  True when given back.
 */
static bool
multi_give_one(SetMember *m, bool session)
{
	RlockStatus status;
	bool		found;

	status = rlock_release_holds(RLOCK_KIND_PLAIN, m->mode, m->key.redis,
								 m->key.len, session, 1, &found);
	if (!found)
	{
		ereport(WARNING,
				(errmsg("lock \"%s\" is not held in %s scope%s by this session",
						m->key.sql, session ? "session" : "transaction",
						m->mode == RLOCK_MODE_SHARED ?
						" in shared mode" : "")));
		return false;
	}
	if (status == RLOCK_STATUS_NOT_HELD)
	{
		ereport(WARNING,
				(errmsg("lock \"%s\" was no longer held in Redis",
						m->key.sql),
				 errdetail("Its lease ran out or it was removed before this release."),
				 (!session && rlock_verify_at_commit) ?
				 errhint("The transaction will fail at commit.") : 0));
		return false;
	}
	rlock_report_status(status, m->key.sql, strlen(m->key.sql));
	return true;
}

/*
 * The body of the functions that give back a set: the newest hold of the
 * scope on each member, in its mode.  Returns how many were given back; a
 * member without one gets a warning, as rlock_release gives.
 *
 * Each member's release is queued before its answer is waited for, so
 * the one whose wait fails (Redis not answering, a cancel) is given back
 * all the same.  In session scope the members after it are given back
 * too, without waiting: nothing else would end them before the session
 * does.  Transaction-scoped ones are left to the transaction's end, which
 * the error brings, and to its check before commit should a savepoint
 * catch the error.
 */
static int
multi_give(FunctionCallInfo fcinfo, bool session)
{
	SetMember  *members;
	int			n;
	volatile int released = 0;
	volatile int i;

	members = multi_members(fcinfo, 1, &n);
	PG_TRY();
	{
		for (i = 0; i < n; i++)
		{
			if (multi_give_one(&members[i], session))
				released++;
		}
	}
	PG_CATCH();
	{
		if (session)
		{
			for (i++; i < n; i++)
				(void) rlock_release_nowait(RLOCK_KIND_PLAIN,
											members[i].mode,
											members[i].key.redis,
											members[i].key.len, true);
		}
		PG_RE_THROW();
	}
	PG_END_TRY();
	return released;
}

Datum
rlock_try_set(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(multi_take(fcinfo, false, true));
}

Datum
rlock_session_try_set(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(multi_take(fcinfo, true, true));
}

Datum
rlock_lock_set(PG_FUNCTION_ARGS)
{
	(void) multi_take(fcinfo, false, false);
	PG_RETURN_VOID();
}

Datum
rlock_session_lock_set(PG_FUNCTION_ARGS)
{
	(void) multi_take(fcinfo, true, false);
	PG_RETURN_VOID();
}

Datum
rlock_release_set(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(multi_give(fcinfo, false));
}

Datum
rlock_session_release_set(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(multi_give(fcinfo, true));
}
