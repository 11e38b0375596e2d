/*-------------------------------------------------------------------------
 *
 * sql.c
 *		The ticket kind's SQL functions, for tests only: a test creates
 *		them (AS 'rlock', 'rlock_test_ticket_...'); no extension script
 *		names them.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		test/kinds/ticket/sql.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "backend/backend.h"

PG_FUNCTION_INFO_V1(rlock_test_ticket_try);
PG_FUNCTION_INFO_V1(rlock_test_ticket_release);
PG_FUNCTION_INFO_V1(rlock_test_ticket_held);
PG_FUNCTION_INFO_V1(rlock_test_ticket_is_locked);
PG_FUNCTION_INFO_V1(rlock_test_ticket_force);
PG_FUNCTION_INFO_V1(rlock_test_ticket_holder);
PG_FUNCTION_INFO_V1(rlock_test_ticket_take);
PG_FUNCTION_INFO_V1(rlock_test_ticket_give);

/*
 * rlock_test_ticket_try(key text, wait interval, session boolean)
 */
Datum
rlock_test_ticket_try(PG_FUNCTION_ARGS)
{
	RlockKey	key;
	RlockStatus status;
	int64		token;
	TimestampTz until;

	rlock_arg_key(fcinfo, 0, &key);
	until = rlock_arg_deadline(rlock_arg_interval_us(fcinfo, 1, "wait",
													 false, true));
	status = rlock_acquire(RLOCK_KIND_TICKET, 0, key.redis, key.len,
						   PG_GETARG_BOOL(2), 1, until, 0, false, false,
						   &token);
	rlock_report_status(status, key.sql, strlen(key.sql));
	PG_RETURN_BOOL(status == RLOCK_STATUS_OK);
}

/*
 * rlock_test_ticket_release(key text, session boolean): false when not
 * held in that scope
 */
Datum
rlock_test_ticket_release(PG_FUNCTION_ARGS)
{
	RlockKey	key;
	RlockStatus status;
	bool		found;

	rlock_arg_key(fcinfo, 0, &key);
	status = rlock_release_holds(RLOCK_KIND_TICKET, 0, key.redis, key.len,
								 PG_GETARG_BOOL(1), 1, &found);
	if (!found || status == RLOCK_STATUS_NOT_HELD)
		PG_RETURN_BOOL(false);
	rlock_report_status(status, key.sql, strlen(key.sql));
	PG_RETURN_BOOL(true);
}

Datum
rlock_test_ticket_held(PG_FUNCTION_ARGS)
{
	RlockKey	key;

	rlock_arg_key(fcinfo, 0, &key);
	PG_RETURN_INT32(rlock_held_count(RLOCK_KIND_TICKET, 0, key.redis,
									 key.len));
}

Datum
rlock_test_ticket_is_locked(PG_FUNCTION_ARGS)
{
	RlockKey	key;

	PG_RETURN_BOOL(rlock_key_query(fcinfo, RLOCK_KIND_TICKET,
								   RLOCK_OP_EXISTS, &key) >= -1);
}

Datum
rlock_test_ticket_force(PG_FUNCTION_ARGS)
{
	RlockKey	key;

	PG_RETURN_BOOL(rlock_key_query(fcinfo, RLOCK_KIND_TICKET,
								   RLOCK_OP_FORCE, &key) == 1);
}

/*
 * The holder's text as the kind gives it, lines joined by '|'
 */
Datum
rlock_test_ticket_holder(PG_FUNCTION_ARGS)
{
	RlockKey	key;
	char	   *text;
	char	   *c;

	(void) rlock_key_query(fcinfo, RLOCK_KIND_TICKET, RLOCK_OP_HOLDER, &key);
	text = pstrdup(rlock_last_detail());
	for (c = text; *c; c++)
		if (*c == '\n')
			*c = '|';
	PG_RETURN_TEXT_P(cstring_to_text(text));
}

/*
 * rlock_test_ticket_take(key text, amount integer, session boolean): one
 * hold of "amount" without waiting, as a semaphore's permits are taken
 */
Datum
rlock_test_ticket_take(PG_FUNCTION_ARGS)
{
	RlockKey	key;
	RlockStatus status;
	int64		token;

	rlock_arg_key(fcinfo, 0, &key);
	status = rlock_acquire(RLOCK_KIND_TICKET, 0, key.redis, key.len,
						   PG_GETARG_BOOL(2), PG_GETARG_INT32(1),
						   GetCurrentTimestamp(), 0, false, false, &token);
	rlock_report_status(status, key.sql, strlen(key.sql));
	PG_RETURN_BOOL(status == RLOCK_STATUS_OK);
}

/*
 * rlock_test_ticket_give(key text, amount integer, session boolean): give
 * back "amount" of one scope's holds, the newest first; false when the
 * scope holds none
 */
Datum
rlock_test_ticket_give(PG_FUNCTION_ARGS)
{
	RlockKey	key;
	RlockStatus status;
	bool		found;

	rlock_arg_key(fcinfo, 0, &key);
	status = rlock_release_holds(RLOCK_KIND_TICKET, 0, key.redis, key.len,
								 PG_GETARG_BOOL(2), PG_GETARG_INT32(1),
								 &found);
	if (!found || status == RLOCK_STATUS_NOT_HELD)
		PG_RETURN_BOOL(false);
	rlock_report_status(status, key.sql, strlen(key.sql));
	PG_RETURN_BOOL(true);
}
