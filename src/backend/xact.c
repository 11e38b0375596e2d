/*-------------------------------------------------------------------------
 *
 * xact.c
 *		The transaction's end for the session's holds: the check before
 *		commit, and the transaction and subtransaction callbacks that
 *		release transaction-scoped holds.
 *
 * Transaction-scoped holds mirror advisory locks:
 *
 * - they end at COMMIT (after the commit is visible: XACT_EVENT_COMMIT
 *   runs after ProcArrayEndTransaction) and at ABORT;
 * - ROLLBACK TO SAVEPOINT, and an exception caught in PL/pgSQL, end the
 *   holds taken inside the subtransaction; RELEASE SAVEPOINT hands them to
 *   the parent;
 * - PREPARE TRANSACTION is refused while transaction-scoped holds exist, as
 *   a prepared transaction outlives the session that owns the Redis hold.
 *
 * A lost transaction-scoped hold makes the commit (or PREPARE) fail with a
 * serialization failure (rlock.verify_at_commit), as the work it protected
 * may have run without the lock, unless the subtransaction it was taken in
 * rolls back.  Before committing a transaction that holds
 * transaction-scoped locks, the session asks the worker to check all of
 * its holds in one round trip and to extend leases shorter than
 * rlock.verify_margin.  The callbacks are registered on first use
 * (holds.c) and return at once while the session holds nothing in
 * transaction scope.  Ending holds here never waits and never raises.
 *
 * Copyright (c) 2026, rlock developers
 *
 * IDENTIFICATION
 *		src/backend/xact.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "utils/timestamp.h"

#include "backend/backend_int.h"
#include "compat.h"

/*
 * A transaction-scoped hold of the current transaction was lost.  Of all
 * such losses, the one whose holds began in the outermost subtransaction:
 * if that one rolls back, so does all the work any lost hold protected;
 * if not, the transaction must not commit.  The key points into the local
 * entry, which stays until the transaction ends (entries are pruned only
 * then), so recording a loss needs no memory.
 */
static const char *xact_lost_key = NULL;
static int	xact_lost_keylen = 0;
static SubTransactionId xact_lost_subid = InvalidSubTransactionId;

/* The check before commit (or PREPARE) was made for this transaction end */
static bool xact_checked = false;

static void rlock_xact_callback(XactEvent event, void *arg);
static void rlock_xact_callback_check(XactEvent event, void *arg);
static void rlock_subxact_callback(SubXactEvent event,
								   SubTransactionId mySubid,
								   SubTransactionId parentSubid, void *arg);

/*
 * Register the callbacks, the first time this session uses rlock.  The
 * check's own callback comes last, so that PostgreSQL calls it first.
 */
void
rlock_xact_register(void)
{
	RegisterXactCallback(rlock_xact_callback, NULL);
	RegisterXactCallback(rlock_xact_callback_check, NULL);
	RegisterSubXactCallback(rlock_subxact_callback, NULL);
}

/*
 * Remember that transaction-scoped holds on an entry, the outermost taken
 * in subtransaction "subid", were lost.  Only the outermost loss counts:
 * every other one rolls back with it.  Allocates nothing.
 */
void
rlock_note_xact_loss(LocalHold *lh, SubTransactionId subid)
{
	if (xact_lost_key != NULL && xact_lost_subid <= subid)
		return;
	xact_lost_key = lh->tag.key.data;
	xact_lost_keylen = lh->tag.key.len;
	xact_lost_subid = subid;
}

/*
 * Does what Redis last said of every transaction-scoped hold vouch for it
 * at this commit (shared/vouch.c)?  It does if Redis confirmed the hold
 * on the current command connection (so no restart or failover came
 * between, as far as a connection that answered in the last second
 * shows) with a lease that ends more than rlock.verify_margin from now,
 * nothing queued or on the wire for it may change it, and the worker has
 * seen nothing wrong with it since.  Asking Redis again could then only
 * catch someone removing the lock by hand: enough for "lease".  For "on"
 * ("tracked"), Redis must also have tracked each hold's key since it
 * confirmed the hold (worker/track.c), so that any change by anyone would
 * have been announced, and the worker must have handled the announcements
 * of changes made up to rlock.verify_window ago.  A hold handed over
 * without waiting for Redis is on the wire ("acquiring") until the
 * transfer's reply: its commit asks, and the worker answers once that
 * reply is in (worker/send.c).
 */
static bool
rlock_xact_holds_vouched(bool tracked)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz enough = TimestampTzPlusMilliseconds(now, rlock_verify_margin);
	uint32		track_epoch;
	dlist_iter	iter;

	if (!rlock_vouching(now, tracked, rlock_fresh_after(now), &track_epoch))
		return false;
	dlist_foreach(iter, &rlock_xact_holds)
	{
		LocalHold  *lh = dlist_container(LocalHold, xact_node, iter.cur);
		RlockHold	h;

		rlock_hold_read(lh->hold, &h);
		if (!rlock_hold_is_current(&h, lh->generation) ||
			!rlock_hold_vouches_now(&h, track_epoch, enough))
			return false;
	}
	return true;
}

/*
 * A transaction-scoped lock taken by a statement that is its own
 * transaction (no BEGIN, not inside a CALL or DO, not one of several
 * statements sent together) is released as soon as that statement ends;
 * warn, as PostgreSQL does for SET LOCAL there.  Once per transaction:
 * a statement locking a key per row says it once.
 */
void
rlock_warn_outside_block(LocalHold *lh)
{
	static LocalTransactionId warned_lxid = InvalidLocalTransactionId;
	char	   *key;

	if (IsTransactionBlock() || rlock_in_routine() ||
		warned_lxid == rlock_local_xid())
		return;
	warned_lxid = rlock_local_xid();
	key = rlock_sql_key(lh->tag.key.data, lh->tag.key.len, strlen(rlock_prefix()));
	ereport(WARNING,
			(errcode(ERRCODE_NO_ACTIVE_SQL_TRANSACTION),
			 errmsg("transaction-scoped lock \"%s\" taken outside a transaction block", key),
			 errdetail("It is released when this statement ends."),
			 errhint("Take it after BEGIN, or use the rlock_session_ functions for a lock that outlives the statement.")));
	pfree(key);
}

/*
 * Was a transaction-scoped hold handed over without waiting for Redis
 * (worker/transfer.c), and its transfer is not answered yet?  Only a
 * waiter whose check before commit was on is so, but the check may have
 * been turned off since: its commit still waits for that answer.
 */
static bool
rlock_xact_holds_unconfirmed(void)
{
	dlist_iter	iter;

	dlist_foreach(iter, &rlock_xact_holds)
	{
		LocalHold  *lh = dlist_container(LocalHold, xact_node, iter.cur);
		RlockHold	h;

		rlock_hold_read(lh->hold, &h);
		if (rlock_hold_is_current(&h, lh->generation) && h.acquiring)
			return true;
	}
	return false;
}

/*
 * PRE_COMMIT, PRE_PREPARE: before a transaction that holds
 * transaction-scoped locks commits, check them all in one round trip
 * (extending short leases to rlock.verify_margin), and refuse the commit
 * if one was lost, now or earlier in the transaction.  With "lease"
 * rather than "on", the round trip is left out when Redis's last word on
 * every hold vouches for it.  Raising here is allowed: the transaction
 * aborts and its holds are released.
 */
static void
rlock_verify_before_commit(void)
{
	dlist_mutable_iter iter;
	RlockStatus status;
	int64		lost;

	if (!dlist_is_empty(&rlock_xact_holds) &&
		(rlock_verify_at_commit != RLOCK_VERIFY_OFF ?
		 !rlock_xact_holds_vouched(rlock_verify_at_commit == RLOCK_VERIFY_ON) :
		 rlock_xact_holds_unconfirmed()))
	{
		status = rlock_hold_request(RLOCK_OP_VERIFY, NULL,
									false, 0, GetCurrentTimestamp(),
									rlock_verify_margin, false, false, &lost);
		rlock_report_status(status, NULL, 0);
	}

	/*
	 * Losses the worker found, by that check or before it: with the check
	 * off, those it knows of without asking (a forced release from this
	 * instance, a renewal or release that found a hold gone) still fail
	 * the commit.
	 */
	dlist_foreach_modify(iter, &rlock_xact_holds)
	{
		LocalHold  *lh = dlist_container(LocalHold, xact_node, iter.cur);

		/* the error below reports the transaction's loss */
		rlock_local_take_note(lh, true, false);
		rlock_local_unpin_if_unused(lh);
	}
	if (xact_lost_key != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("lock \"%s\" was lost before the transaction committed",
						rlock_sql_key(xact_lost_key, xact_lost_keylen,
									  strlen(rlock_prefix()))),
				 errdetail("Its lease ran out, or it was removed from Redis, while the transaction held it."),
				 errhint("Retry the transaction.  A lease longer than the work, or the watchdog (no lease), keeps the lock.")));
}

/*
 * Make the check before commit the first pre-commit work PostgreSQL does,
 * ahead of any other module's, which may not be undone: postgres_fdw
 * commits its remote transactions at XACT_EVENT_PRE_COMMIT, and a commit
 * that the check then failed would leave them committed.  PostgreSQL
 * calls the callback registered last first, and a module registers on its
 * first use in the session, which may come after rlock's: utility.c calls
 * this after every statement while the transaction has something the
 * check looks at, and so does every transaction-scoped acquisition (a
 * PL/pgSQL expression takes a lock with no statement end, which a
 * procedure's COMMIT may follow), and the check has a callback of its own
 * that moves to the front of the list.
 *
 * Moving it frees the old list item.  Should a statement end while
 * PostgreSQL walks the list (another module running SQL from its own
 * pre-commit callback), the walk may then pass the check by: the main
 * callback, which never moves, makes the check then if it was not made.
 */
void
rlock_xact_callback_first(void)
{
	if (!rlock_local_used() ||
		(dlist_is_empty(&rlock_xact_holds) && xact_lost_key == NULL))
		return;
	UnregisterXactCallback(rlock_xact_callback_check, NULL);
	RegisterXactCallback(rlock_xact_callback_check, NULL);
}

/*
 * The transaction ended: forget its loss.
 */
static void
rlock_forget_xact_loss(void)
{
	xact_lost_key = NULL;
	xact_lost_keylen = 0;
	xact_lost_subid = InvalidSubTransactionId;
}

/*
 * End transaction-scoped holds: all of them, or those of one aborted
 * subtransaction.  Runs in COMMIT/ABORT callbacks: no errors, no waits.
 */
static void
rlock_end_xact_holds(SubTransactionId subid)
{
	dlist_mutable_iter iter;
	bool		released = false;

	dlist_foreach_modify(iter, &rlock_xact_holds)
	{
		LocalHold  *lh = dlist_container(LocalHold, xact_node, iter.cur);
		int32		n;

		n = rlock_local_remove_holds(lh, false, subid, 0);
		if (n > 0)
		{
			rlock_local_give_back(lh, n);
			released = true;
		}
	}
	if (released)
		rlock_wake_worker();
}

/*
 * The check before a commit or a PREPARE, once per transaction end.
 */
static void
rlock_check_before_end(XactEvent event)
{
	if (xact_checked)
		return;
	xact_checked = true;
	if (event == XACT_EVENT_PRE_PREPARE && !dlist_is_empty(&rlock_xact_holds))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("cannot PREPARE a transaction that holds transaction-scoped rlocks"),
				 errhint("Release them first, or take session-scoped locks with rlock_session_lock().")));
	/* before a PREPARE: a lock released earlier may have been lost */
	rlock_verify_before_commit();
}

/*
 * The callback that makes the check, kept first in PostgreSQL's list
 * (rlock_xact_callback_first).
 */
static void
rlock_xact_callback_check(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_PRE_COMMIT || event == XACT_EVENT_PRE_PREPARE)
		rlock_check_before_end(event);
}

static void
rlock_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
		case XACT_EVENT_PRE_COMMIT:
			/* if the walk passed the check's own callback by */
			rlock_check_before_end(event);
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PREPARE:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			xact_checked = false;
			rlock_forget_xact_loss();
			rlock_abandon_request();
			if (!dlist_is_empty(&rlock_xact_holds))
				rlock_end_xact_holds(InvalidSubTransactionId);
			rlock_local_prune();
			break;
		default:
			break;
	}
}

static void
rlock_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	dlist_iter	iter;
	int			i;

	switch (event)
	{
		case SUBXACT_EVENT_ABORT_SUB:
			/* the outermost loss was inside: every loss rolls back */
			if (xact_lost_key != NULL && xact_lost_subid >= mySubid)
				rlock_forget_xact_loss();
			rlock_abandon_request();
			if (!dlist_is_empty(&rlock_xact_holds))
				rlock_end_xact_holds(mySubid);
			break;
		case SUBXACT_EVENT_COMMIT_SUB:
			if (xact_lost_subid == mySubid)
				xact_lost_subid = parentSubid;
			dlist_foreach(iter, &rlock_xact_holds)
			{
				LocalHold  *lh = dlist_container(LocalHold, xact_node,
												 iter.cur);

				for (i = 0; i < lh->nruns; i++)
				{
					if (!lh->runs[i].session && lh->runs[i].subid == mySubid)
						lh->runs[i].subid = parentSubid;
				}
			}
			break;
		default:
			break;
	}
}

