/*-------------------------------------------------------------------------
 *
 * functions.c
 *		Argument checks for the SQL functions of every lock kind, and the
 *		functions that concern no kind in particular: rlock_release_all,
 *		rlock_held, rlock_is_locked, rlock_ttl, rlock_force_release.
 *
 * Keys are sent to Redis in UTF-8 (Redisson's encoding) with
 * rlock.key_prefix in front.  Messages name the key as the caller wrote it.
 * The functions that take and give back locks are their kind's (for
 * example src/kinds/plain/sql.c).
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/backend/functions.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/int.h"
#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "backend/backend.h"

PG_FUNCTION_INFO_V1(rlock_release_all);
PG_FUNCTION_INFO_V1(rlock_held);
PG_FUNCTION_INFO_V1(rlock_is_locked);
PG_FUNCTION_INFO_V1(rlock_ttl);
PG_FUNCTION_INFO_V1(rlock_force_release);
PG_FUNCTION_INFO_V1(rlock_holder);

void
rlock_check_loaded(void)
{
	if (rlock_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("rlock must be loaded via shared_preload_libraries"),
				 errhint("Add rlock to shared_preload_libraries in postgresql.conf and restart the server.")));
}

/*
 * The session's rlock.key_prefix: the setting's value when the session
 * first used rlock, for the rest of its life.  Its holds are known by
 * their prefixed keys; a prefix that changed under them would make them
 * impossible to name.  session_prefix is the value as set, redis_prefix
 * the same in UTF-8, as it goes to Redis.
 */
static char *session_prefix = NULL;
static char *redis_prefix = NULL;

const char *
rlock_prefix(void)
{
	if (redis_prefix == NULL)
	{
		char	   *utf8 = pg_server_to_any(rlock_key_prefix,
											strlen(rlock_key_prefix),
											PG_UTF8);

		redis_prefix = MemoryContextStrdup(TopMemoryContext, utf8);
		session_prefix = MemoryContextStrdup(TopMemoryContext,
											 rlock_key_prefix);
	}
	return redis_prefix;
}

/*
 * Check hook of rlock.key_prefix: a SET of another prefix, once the
 * session used rlock, is refused.  (A reload's new value reaches new
 * sessions only; role and database settings apply at session start.)
 */
bool
rlock_check_key_prefix(char **newval, void **extra, GucSource source)
{
	/* PGC_S_TEST: ALTER ROLE/DATABASE SET checking a value for later */
	if (session_prefix != NULL && source >= PGC_S_INTERACTIVE &&
		source != PGC_S_TEST && strcmp(*newval, session_prefix) != 0)
	{
		GUC_check_errcode(ERRCODE_CANT_CHANGE_RUNTIME_PARAM);
		GUC_check_errmsg("rlock.key_prefix cannot change once the session has used rlock");
		GUC_check_errdetail("This session's keys have the prefix \"%s\".",
							session_prefix);
		return false;
	}
	return true;
}

/*
 * The setting can still move away from the session's prefix without a
 * SET: a SET LOCAL or a function's SET clause that ends, a rollback.  A
 * lock call then refuses to guess which of the two the caller means.
 */
static void
rlock_check_prefix_unchanged(void)
{
	(void) rlock_prefix();
	if (strcmp(rlock_key_prefix, session_prefix) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_CANT_CHANGE_RUNTIME_PARAM),
				 errmsg("rlock.key_prefix changed after the session first used rlock"),
				 errdetail("This session's keys have the prefix \"%s\"; the setting is now \"%s\".",
						   session_prefix, rlock_key_prefix),
				 errhint("Set rlock.key_prefix back to \"%s\", or use a new session for the other prefix.",
						 session_prefix)));
}

/*
 * Holds live in the session's own process: a parallel worker (reached
 * through a wrapper wrongly marked PARALLEL SAFE) would take a lock that
 * vanishes with it, or release one it does not have.  Refused as
 * PostgreSQL refuses advisory locks there.
 */
void
rlock_check_not_parallel(void)
{
	if (IsInParallelMode())
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("cannot use rlock locks during a parallel operation"),
				 errhint("Mark functions that call rlock functions PARALLEL UNSAFE.")));
}

/*
 * The checks every function that names keys makes first: without
 * preloading not even the settings exist.
 */
void
rlock_check_key_call(void)
{
	rlock_check_loaded();
	rlock_check_not_parallel();
	rlock_check_prefix_unchanged();
}

/*
 * Check the key argument and build its Redis form.
 */
void
rlock_arg_key(FunctionCallInfo fcinfo, int argno, RlockKey *key)
{
	rlock_check_key_call();
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("lock key must not be null")));
	rlock_text_key(PG_GETARG_TEXT_PP(argno), key);
}

/*
 * Check a key given as text (not null) and build its Redis form, after
 * rlock_check_key_call().
 */
void
rlock_text_key(text *t, RlockKey *key)
{
	int			len;
	char	   *utf8;
	int			utf8len;
	int			prefixlen = strlen(rlock_prefix());

	len = VARSIZE_ANY_EXHDR(t);
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lock key must not be empty")));

	key->sql = text_to_cstring(t);
	utf8 = pg_server_to_any(key->sql, len, PG_UTF8);
	utf8len = (utf8 == key->sql) ? len : strlen(utf8);

	if ((int64) prefixlen + utf8len > rlock_max_key_length)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("lock key is too long"),
				 errdetail("The key takes %d bytes in Redis, rlock.key_prefix included; the limit is %d bytes.",
						   prefixlen + utf8len, rlock_max_key_length),
				 errhint("Use a shorter key, or increase rlock.max_key_length.")));

	key->len = prefixlen + utf8len;
	key->redis = palloc(key->len + 1);
	memcpy(key->redis, rlock_prefix(), prefixlen);
	memcpy(key->redis + prefixlen, utf8, utf8len);
	key->redis[key->len] = '\0';

	/*
	 * In a Redis Cluster a lock's scripts touch one slot: the key's, which
	 * its unlock channel and token counter must share.  Redisson's own
	 * scripts fail with CROSSSLOT on such a name.
	 */
	if (rlock_topology == RLOCK_TOPOLOGY_CLUSTER &&
		!rlock_name_fits_slot(key->redis, key->len))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lock key \"%s\" cannot be used in a Redis Cluster",
						key->sql),
				 errdetail("Its unlock channel and fencing token counter, which Redisson names after it, hash to another slot than the key: a brace that opens no hash tag, or one that closes none."),
				 errhint("Use a key with a complete hash tag, such as \"{%s}\", or without braces.",
						 key->sql)));
}

/*
 * An interval argument in microseconds.  NULL is refused (SQLSTATE 22004)
 * unless null_ok, in which case -1 is returned.  Negative values are
 * refused, and so is zero unless zero_ok.
 */
int64
rlock_arg_interval_us(FunctionCallInfo fcinfo, int argno, const char *what,
					  bool null_ok, bool zero_ok)
{
	Interval   *iv;
	int64		days;
	int64		us;

	if (PG_ARGISNULL(argno))
	{
		if (null_ok)
			return -1;
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", what)));
	}
	iv = PG_GETARG_INTERVAL_P(argno);

	days = (int64) iv->month * DAYS_PER_MONTH + iv->day;
	if (pg_mul_s64_overflow(days, USECS_PER_DAY, &us) ||
		pg_add_s64_overflow(us, iv->time, &us))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s is out of range", what)));
	if (us < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be negative", what)));
	if (us == 0 && !zero_ok)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be greater than zero", what)));
	if (us > RLOCK_MAX_DURATION_US)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s is out of range", what),
				 errdetail("A %s may be at most %d days.", what,
						   RLOCK_MAX_DURATION_DAYS)));
	return us;
}

/*
 * The lease argument in milliseconds, rounded up; 0 means the watchdog.
 */
int64
rlock_arg_lease_ms(FunctionCallInfo fcinfo, int argno)
{
	int64		us = rlock_arg_interval_us(fcinfo, argno, "lease", true, false);

	if (us < 0)
		return 0;
	return us / 1000 + (us % 1000 != 0);	/* rounded up, without overflow */
}

/*
 * Deadline of a wait of "us" microseconds from now (at most
 * RLOCK_MAX_DURATION_US, so it cannot overflow).
 */
TimestampTz
rlock_arg_deadline(int64 us)
{
	return GetCurrentTimestamp() + us;
}

/*
 * Ask Redis about a key, through its kind's commands (EXISTS, PTTL: the
 * probe; FORCE, HOLDER; CALL: the kind's call "call" with argument
 * "arg").
 */
static RlockStatus
rlock_query(RlockKind kind, RlockOp op, RlockKey *key, int call, int64 arg,
			int64 *value)
{
	RlockRequest req;

	memset(&req, 0, sizeof(req));
	req.args.op = op;
	req.args.kind = (uint8) kind;
	req.args.mode = 0;
	req.args.hold = -1;
	req.args.keylen = key->len;
	req.args.call = (int16) call;
	req.args.call_arg = arg;
	req.args.wait_until = GetCurrentTimestamp();
	req.key = key->redis;
	return rlock_request(&req, value);
}

Datum
rlock_release_all(PG_FUNCTION_ARGS)
{
	RlockStatus status;
	int			n;

	rlock_check_loaded();
	rlock_check_not_parallel();
	n = rlock_release_session_all(&status);
	rlock_report_status(status, NULL, 0);
	PG_RETURN_INT32(n);
}

Datum
rlock_held(PG_FUNCTION_ARGS)
{
	RlockKey	key;

	rlock_arg_key(fcinfo, 0, &key);
	PG_RETURN_INT32(rlock_held_count(RLOCK_KIND_PLAIN, 0, key.redis,
									 key.len));
}

/*
 * Ask the worker op about the key in argument 0, in a kind; returns
 * Redis's number.  The functions below are the plain kind's; another
 * kind's SQL functions ask with their kind.
 */
int64
rlock_key_query(FunctionCallInfo fcinfo, RlockKind kind, RlockOp op,
				RlockKey *key)
{
	RlockStatus status;
	int64		value = 0;

	rlock_arg_key(fcinfo, 0, key);
	status = rlock_query(kind, op, key, 0, 0, &value);
	rlock_report_status(status, key->sql, strlen(key->sql));
	return value;
}

/*
 * Run the kind's call "call" with argument "arg" on the key in argument 0
 * (a semaphore's or a latch's count, say); returns Redis's number.  Sent
 * once: if the connection goes before Redis answers, the caller gets an
 * error saying the outcome is unknown.
 */
int64
rlock_key_call(FunctionCallInfo fcinfo, RlockKind kind, int call, int64 arg,
			   RlockKey *key)
{
	RlockStatus status;
	int64		value = 0;

	rlock_arg_key(fcinfo, 0, key);
	status = rlock_query(kind, RLOCK_OP_CALL, key, call, arg, &value);
	rlock_report_status(status, key->sql, strlen(key->sql));
	return value;
}

/*
 * A duration in ms from Redis, whatever it is, as an interval that does
 * not overflow.
 */
static Interval *
rlock_ms_interval(int64 ms)
{
	Interval   *result = (Interval *) palloc0(sizeof(Interval));

	result->time = Min(ms, PG_INT64_MAX / 1000) * 1000;
	return result;
}

Datum
rlock_is_locked(PG_FUNCTION_ARGS)
{
	RlockKey	key;

	/* the lease left, -1 for none; -2: no lock (see probe.lua) */
	PG_RETURN_BOOL(rlock_key_query(fcinfo, RLOCK_KIND_PLAIN, RLOCK_OP_EXISTS,
								   &key) >= -1);
}

Datum
rlock_ttl(PG_FUNCTION_ARGS)
{
	RlockKey	key;
	int64		value = rlock_key_query(fcinfo, RLOCK_KIND_PLAIN,
										RLOCK_OP_PTTL, &key);

	/* -2: no lock (no key, or one not shaped like a lock); -1: a lock
	 * without expiry */
	if (value < 0)
		PG_RETURN_NULL();
	PG_RETURN_INTERVAL_P(rlock_ms_interval(value));
}

/*
 * Remove a lock whoever holds it (a session of any instance, a Redisson
 * client) and wake its waiters, as Redisson's forceUnlock() does.  Not
 * PUBLIC's to run (the extension script revokes it).  Holders learn of
 * the loss as of any other: a transaction at its commit (40001), a
 * session at its next renewal or use of the key.
 */
Datum
rlock_force_release(PG_FUNCTION_ARGS)
{
	RlockKey	key;

	PG_RETURN_BOOL(rlock_key_query(fcinfo, RLOCK_KIND_PLAIN, RLOCK_OP_FORCE,
								   &key) == 1);
}

/*
 * The backend of a session of this instance, by the owner number of a
 * hash field (the session's number plus the mode of its holds there); 0
 * if none holds an entry now.
 */
static int
rlock_local_owner_pid(uint64 field)
{
	int			i;
	int			pid = 0;

	for (i = 0; i < rlock_shared->nholds && pid == 0; i++)
	{
		RlockHold	h;

		rlock_hold_read(i, &h);
		if (h.in_use && RLOCK_OWNER_FIELD(h.owner_id, h.mode) == field)
			pid = h.pid;
	}
	return pid;
}

#define HOLDER_COLS 7

/*
 * rlock_holder(key): who holds the lock, wherever it is held.  An owner
 * "<uuid>:<n>" whose uuid is this instance's, or that of an instance that
 * registered itself in Redis (worker/registry.c), is an rlock session:
 * the instance's name and the session's process are shown.  Any other
 * owner of that form is a Redisson client (or an rlock instance that is
 * gone).  A free lock gives a row of NULLs.
 */
Datum
rlock_holder(PG_FUNCTION_ARGS)
{
	RlockKey	key;
	int64		lease_ms;
	TupleDesc	tupdesc;
	Datum		values[HOLDER_COLS];
	bool		nulls[HOLDER_COLS];
	char	   *text;
	char	   *field[5];
	char	   *colon;
	char	   *end;
	int			i;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	lease_ms = rlock_key_query(fcinfo, RLOCK_KIND_PLAIN, RLOCK_OP_HOLDER,
							   &key);

	memset(nulls, true, sizeof(nulls));
	text = pstrdup(rlock_last_detail());
	for (i = 0; i < 5; i++)
	{
		field[i] = text;
		text = strchr(text, '\n');
		if (text == NULL)
			break;
		*text++ = '\0';
	}
	if (i == 4 && field[0][0] != '\0')
	{
		long		count;
		long		pid = 0;
		long		owners;
		bool		ours = false;

		/* owner and count, as Redis has them */
		values[0] = CStringGetTextDatum(rlock_sql_text(field[0],
													   strlen(field[0])));
		nulls[0] = false;
		errno = 0;
		count = strtol(field[1], &end, 10);
		if (errno == 0 && *end == '\0' && end != field[1] &&
			count >= 0 && count <= PG_INT32_MAX)
		{
			values[1] = Int32GetDatum((int32) count);
			nulls[1] = false;
		}

		/* whose: this instance's, a registered instance's, or a client's */
		colon = strrchr(field[0], ':');
		if (colon != NULL && colon - field[0] == RLOCK_UUID_LEN &&
			strncmp(field[0], rlock_shared->uuid, RLOCK_UUID_LEN) == 0)
		{
			char		name[RLOCK_INSTANCE_NAME_LEN];
			uint64		n = strtou64(colon + 1, &end, 10);

			ours = true;
			rlock_instance_display_name(name, sizeof(name));
			values[3] = CStringGetTextDatum(name);
			nulls[3] = false;
			if (*end == '\0')
				pid = rlock_local_owner_pid(n);
		}
		else if (field[2][0] != '\0')
		{
			values[3] = CStringGetTextDatum(rlock_sql_text(field[2],
														   strlen(field[2])));
			nulls[3] = false;
			errno = 0;
			pid = strtol(field[3], &end, 10);
			if (errno != 0 || *end != '\0' || pid < 0 || pid > PG_INT32_MAX)
				pid = 0;
		}
		values[2] = CStringGetTextDatum(ours || !nulls[3] ? "rlock" :
										colon != NULL ? "redisson" : "unknown");
		nulls[2] = false;
		if (pid > 0)
		{
			values[4] = Int32GetDatum((int32) pid);
			nulls[4] = false;
		}

		/* the lease left: NULL for none (a key without expiry) */
		if (lease_ms >= 0)
		{
			values[5] = IntervalPGetDatum(rlock_ms_interval(lease_ms));
			nulls[5] = false;
		}
		errno = 0;
		owners = strtol(field[4], &end, 10);
		if (errno == 0 && *end == '\0' && owners >= 0 && owners <= PG_INT32_MAX)
		{
			values[6] = Int32GetDatum((int32) owners);
			nulls[6] = false;
		}
	}
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
