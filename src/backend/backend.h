/*-------------------------------------------------------------------------
 *
 * backend.h
 *		The backend side, for the SQL functions of every lock kind:
 *		argument checks, the session's holds and the request path.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/backend/backend.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RLOCK_BACKEND_H
#define RLOCK_BACKEND_H

#include "fmgr.h"
#include "utils/guc.h"

#include "shared/shared.h"

/* functions.c: argument checks */

/* A lock key as given in SQL and as stored in Redis */
typedef struct RlockKey
{
	char	   *sql;			/* as the caller wrote it, for messages */
	char	   *redis;			/* prefix + key in UTF-8 */
	int			len;			/* length of redis */
} RlockKey;

extern void rlock_check_loaded(void);
extern void rlock_check_not_parallel(void);
extern const char *rlock_prefix(void);
extern bool rlock_check_key_prefix(char **newval, void **extra,
								   GucSource source);
extern void rlock_check_key_call(void);
extern void rlock_arg_key(FunctionCallInfo fcinfo, int argno, RlockKey *key);
extern void rlock_text_key(text *t, RlockKey *key);
extern int64 rlock_arg_interval_us(FunctionCallInfo fcinfo, int argno,
								   const char *what, bool null_ok,
								   bool zero_ok);
extern int64 rlock_arg_lease_ms(FunctionCallInfo fcinfo, int argno);
extern TimestampTz rlock_arg_deadline(int64 us);
extern int64 rlock_key_query(FunctionCallInfo fcinfo, RlockKind kind,
							 RlockOp op, RlockKey *key);
extern int64 rlock_key_call(FunctionCallInfo fcinfo, RlockKind kind,
							int call, int64 arg, RlockKey *key);

/* utility.c: DROP EXTENSION refused while locks are held; statement ends */
extern void rlock_utility_init(void);
extern bool rlock_in_routine(void);

/* holds.c: the backend's holds, each on a key in a kind and mode */
extern RlockStatus rlock_acquire(RlockKind kind, int mode, const char *key,
								 int keylen, bool session, int32 amount,
								 TimestampTz wait_until, int64 lease_ms,
								 bool use_lock_timeout, bool want_token,
								 int64 *token);
extern RlockStatus rlock_release_holds(RlockKind kind, int mode,
									   const char *key, int keylen,
									   bool session, int32 amount,
									   bool *found);
extern RlockStatus rlock_acquire_set(RlockKind kind,
									 const RlockKeyRef *keys, int n,
									 bool session, int64 lease_ms,
									 int *busy);
extern int	rlock_release_session_all(RlockStatus *status);
extern int	rlock_held_count(RlockKind kind, int mode, const char *key,
							 int keylen);
extern int	rlock_held_scope(RlockKind kind, int mode, const char *key,
							 int keylen, bool session);
extern int64 rlock_held_token(RlockKind kind, int mode, const char *key,
							  int keylen);
extern bool rlock_release_nowait(RlockKind kind, int mode, const char *key,
								 int keylen, bool session);

/* xact.c: the transaction's end */
extern void rlock_xact_callback_first(void);

/* request.c: the backend side of the request path */
extern uint64 rlock_my_owner_id(void);

/*
 * A request as a backend makes it: the arguments it puts in its slot
 * (args.owner_id is filled in by rlock_request), and the key of a request
 * about a key (EXISTS, PTTL, FORCE, HOLDER), args.keylen bytes long.
 */
typedef struct RlockRequest
{
	RlockRequestArgs args;
	const char *key;
	const int  *set;			/* ACQUIRE_SET: args.nset entry and
								 * generation pairs */
	bool		use_lock_timeout;	/* lock_timeout applies to the wait */
} RlockRequest;

extern RlockStatus rlock_request(const RlockRequest *req, int64 *value);
extern void rlock_abandon_request(void);
extern bool rlock_give_up_unanswered(void);

/* deadlock.c */
extern char *rlock_deadlock_look(const char *noted);
extern int	rlock_rlock_blockers(int pid, int **pids);
extern void rlock_deadlock_told(const char *detail);
extern const char *rlock_last_detail(void);
/* calls.c: the bodies of the kinds' functions that take and give back */
extern bool rlock_call_check(RlockKind kind, int mode, const RlockKey *key);
extern void rlock_call_refuse_upgrade(const RlockKey *key);
extern bool rlock_call_take(FunctionCallInfo fcinfo, RlockKind kind,
							int mode, bool session, bool bounded,
							bool want_token, int64 *token);
extern bool rlock_call_give(FunctionCallInfo fcinfo, RlockKind kind,
							int mode, bool session, const char *suffix,
							const char *other);

extern void rlock_report_status(RlockStatus status, const char *key,
								int keylen);

#endif							/* RLOCK_BACKEND_H */
