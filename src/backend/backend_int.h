/*-------------------------------------------------------------------------
 *
 * backend_int.h
 *		What the files of src/backend share among themselves: the
 *		session's local holds (holds.c), which the transaction callbacks
 *		(xact.c) end.  Nothing outside src/backend includes this.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/backend/backend_int.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RLOCK_BACKEND_INT_H
#define RLOCK_BACKEND_INT_H

#include "lib/ilist.h"

#include "backend/backend.h"

/*
 * Consecutive holds alike in scope, subtransaction and lease.  A hold taken
 * with a fencing token gets a run of its own.
 */
typedef struct HoldRun
{
	bool		session;
	SubTransactionId subid;		/* transaction scope: where it was taken */
	int64		lease_ms;		/* 0 = the watchdog */
	int64		token;			/* fencing token, 0 if none was asked for */
	int32		count;
} HoldRun;

/*
 * What a session's holds are on, as a LOCALLOCKTAG names a lock and a
 * mode: a key, in a kind and the kind's mode.  One session may hold one
 * key in several kinds or modes, each its own local and shared entry.
 */
typedef struct LocalHoldTag
{
	RlockKeyRef key;			/* data in rlock_session_context */
	uint8		kind;			/* RlockKind */
	uint8		mode;
} LocalHoldTag;

typedef struct LocalHold
{
	LocalHoldTag tag;			/* hash key */
	int			hold;			/* shared entry, -1 if none yet */
	uint32		generation;		/* of the shared entry when we got it */
	bool		pinned;
	int32		session_count;
	int32		xact_count;
	TimestampTz acquired_at;	/* when the current holds began */
	int			nruns;
	int			maxruns;
	HoldRun    *runs;
	dlist_node	xact_node;		/* in xact_holds while xact_count > 0 */
	dlist_node	idle_node;		/* in idle_holds while not pinned */
} LocalHold;

/* holds.c: the session's holds */
extern MemoryContext rlock_session_context;
extern dlist_head rlock_xact_holds;	/* entries with xact_count > 0 */
extern bool rlock_local_used(void);
extern int32 rlock_local_remove_holds(LocalHold *lh, bool session,
									  SubTransactionId subid, int32 max);
extern void rlock_local_give_back(LocalHold *lh, int32 count);
extern void rlock_local_take_note(LocalHold *lh, bool warn_session,
								  bool warn_xact);
extern void rlock_local_unpin_if_unused(LocalHold *lh);
extern void rlock_local_prune(void);
extern RlockStatus rlock_hold_request(RlockOp op, LocalHold *lh,
									  bool session, int32 amount,
									  TimestampTz wait_until, int64 lease_ms,
									  bool use_lock_timeout, bool want_token,
									  int64 *value);

/* xact.c: the transaction's end */
extern void rlock_xact_register(void);
extern void rlock_note_xact_loss(LocalHold *lh, SubTransactionId subid);
extern void rlock_warn_outside_block(LocalHold *lh);

#endif							/* RLOCK_BACKEND_INT_H */
